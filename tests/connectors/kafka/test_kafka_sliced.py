"""The two-phase Kafka sink with one transaction per task slice (issue #14, model (b)).

Records go from the tasks straight to Kafka; the driver produces none. The slice-level tests
drive :class:`SliceTransaction` directly against the real broker (no Spark needed to hold a
transaction open or to re-run a slice); the query-level tests run Spark.
"""

from __future__ import annotations

import logging
from collections import Counter
from concurrent.futures import Future

import pyarrow as pa
import pytest
from kafka_two_brokers import two_brokers

from connectors import kafka
from connectors.kafka.progress import SinkProgress
from connectors.kafka.settings import KafkaSinkSettings
from connectors.kafka.slices import (
    SliceTransaction,
    lingering_slices,
    record_batch,
    recover_slices,
    replay_state,
)
from jobs.exactly_once_kafka import forward
from spark_ext import kafka_clients
from spark_ext.jobrun import JobRun, run_job
from spark_ext.recovery.kills import JOB_TIMEOUT_S, kill_at_each_point
from spark_ext.sinks.errors import BatchRegressionError, ProduceFailedError
from spark_ext.sinks.protocol import KAFKA_SLICED
from tests.conftest import start_selected, unique_topic
from tests.connectors.conftest import EVENTS, MAX_OFFSETS, forward_events

pytestmark = pytest.mark.integration

JOB = "jobs.exactly_once_kafka"


def settings_for(bootstrap: str, topic: str, sink_id: str, **extra) -> KafkaSinkSettings:
    return KafkaSinkSettings(bootstrap=bootstrap, topic=topic, sink_id=sink_id, **extra)


def arrow(values, partitions=None) -> pa.RecordBatch:
    cols = {
        "key": [f"k-{v}" for v in values],
        "value": [f"v-{v}" for v in values],
        "record_id": [f"in/0/{v}" for v in values],
    }
    if partitions is not None:
        cols["partition"] = pa.array(partitions, pa.int32())
    return pa.RecordBatch.from_pydict(cols)


def values(bootstrap, topic, read_committed=True) -> Counter:
    got = kafka.consume_all(bootstrap, topic, read_committed=read_committed)
    return Counter(value.decode() for _, _, _, value in got)


def write_slice(settings, index, batch_id, *batches):
    with SliceTransaction(settings, index) as tx:
        return tx.write(batch_id, iter(batches))


# -- one slice, no Spark ------------------------------------------------------------------
def test_a_rerun_slice_with_the_same_records_in_another_order_is_skipped(
    kafka_bootstrap, new_topic
):
    topic = new_topic("slice-rerun", partitions=2)
    s = settings_for(kafka_bootstrap, topic, "slice_rerun")

    first = write_slice(s, 0, 4, arrow(range(10)))
    again = write_slice(s, 0, 4, arrow(range(9, -1, -1)))  # a shuffle may reorder a slice

    assert (first.skipped, again.skipped) == (False, True)
    assert again.digest == first.digest
    assert values(kafka_bootstrap, topic) == Counter(f"v-{i}" for i in range(10))


def test_rows_that_moved_to_another_task_in_a_rerun_are_recognised_across_restarts(
    kafka_bootstrap, new_topic
):
    """Spark does not keep a row's task index across a restart (the Kafka source orders a
    replayed batch's offset ranges differently, and ``minPartitions`` or a ``coalesce`` may cut
    the batch otherwise). Slice X committed under index 0; after a restart X runs as task 1
    and slice Y as task 0; after another restart Y and a part of X run as task 2. Each start
    finds the partly committed batch; its tasks read back the record ids committed and write
    the rest: nothing is lost or written twice."""
    topic = new_topic("slice-moved", partitions=2)
    s = settings_for(kafka_bootstrap, topic, "slice_moved")
    xs, ys = arrow(range(10)), arrow(range(10, 20))
    write_slice(s, 0, 4, xs)  # first run: X under index 0, then a crash

    second = replay_state(s)
    assert (second.recorded, second.partial) == (None, 4)
    moved = write_slice(second, 1, 4, xs)  # X is task 1 now: every record found, aborted
    fresh = write_slice(second, 0, 4, ys)  # Y is task 0: written (index 0 keeps X's digest)

    # Batch 4 is not recorded yet: it re-runs once more, sliced otherwise again.
    third = replay_state(s)
    again = write_slice(third, 2, 4, pa.concat_batches([ys, arrow(range(5))]))

    assert (moved.skipped, fresh.skipped, again.skipped) == (True, False, True)
    assert values(kafka_bootstrap, topic) == Counter(f"v-{i}" for i in range(20))


def test_a_slice_below_its_recorded_batch_raises_and_writes_nothing(kafka_bootstrap, new_topic):
    """X1 inside the task, before anything is produced (a deleted checkpoint restarts at 0)."""
    topic = new_topic("slice-x1", partitions=2)
    s = settings_for(kafka_bootstrap, topic, "slice_x1")
    write_slice(s, 1, 7, arrow(range(3)))

    with pytest.raises(BatchRegressionError):
        write_slice(s, 1, 0, arrow(range(100, 103)))

    assert values(kafka_bootstrap, topic) == Counter(f"v-{i}" for i in range(3))


def test_a_retried_attempt_fences_the_first_whose_open_records_never_become_visible(
    kafka_bootstrap, new_topic
):
    """Two attempts of one task (a retry, or speculation): the second ``init_transactions``
    fences the first, aborting what it had flushed; a committed consumer sees each record
    once, an uncommitted one also the aborted copies."""
    from connectors.kafka.producer import SliceFenced

    topic = new_topic("slice-fence", partitions=2)
    s = settings_for(kafka_bootstrap, topic, "slice_fence")
    first = SliceTransaction(s, 0)
    producer = first.open()
    producer.begin()
    for i in range(5):
        producer.send(b"k", f"v-{i}".encode(), None)
    producer.flush(0)  # in the log, uncommitted

    second = write_slice(s, 0, 0, arrow(range(5)))

    with pytest.raises(SliceFenced):  # the first attempt is fenced
        producer.commit(s.names.slice_group(0), 0, "{}")
    first._producer = None  # fenced: nothing to close cleanly

    assert second.skipped is False
    assert values(kafka_bootstrap, topic) == Counter(f"v-{i}" for i in range(5))
    assert values(kafka_bootstrap, topic, read_committed=False) == Counter(
        {f"v-{i}": 2 for i in range(5)}
    )


def test_a_start_aborts_a_slice_transaction_a_killed_task_left_open(kafka_bootstrap, new_topic):
    """A task killed mid-transaction whose slice the replay no longer has: its open
    transaction would hold back every ``read_committed`` consumer of those partitions until
    ``transaction_timeout_ms``; the next start finds it (ListTransactions) and aborts it."""
    topic = new_topic("slice-linger", partitions=1)
    s = settings_for(kafka_bootstrap, topic, "slice_linger")
    stuck = SliceTransaction(s, 5)
    producer = stuck.open()
    producer.begin()
    producer.send(None, b"orphan", None)
    producer.flush(0)
    assert lingering_slices(s) == [s.names.slice_id(5)]

    recover_slices(s)

    assert lingering_slices(s) == []
    write_slice(s, 0, 0, arrow(["after"]))
    # Visible to read_committed at once: the orphan no longer holds the stable offset back.
    assert values(kafka_bootstrap, topic) == Counter({"v-after": 1})
    stuck._producer = None


def test_an_empty_batch_is_recorded_and_writes_nothing(kafka_bootstrap, new_topic):
    """A batch without rows has no slice (no task opens a transaction): step 4 records its
    id, and its replay records nothing again."""
    topic = new_topic("slice-empty", partitions=1)
    s = recover_slices(settings_for(kafka_bootstrap, topic, "slice_empty"))

    record_batch(s, 0, [])
    record_batch(s, 0, [])  # the replay: already recorded

    assert kafka.consume_all(kafka_bootstrap, topic, read_committed=False) == []
    assert SinkProgress(kafka_bootstrap, topic, "slice_empty").read().batch_id == 0


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with two_brokers(tmp_path_factory.mktemp("sliced-two-brokers")) as c:
        yield c


def test_a_slice_with_an_undelivered_record_raises_and_commits_nothing(cluster):
    """K1 per slice: a partition whose leader is paused past ``delivery_timeout_ms``; the
    slice's transaction is aborted and neither its records nor its progress are committed."""
    topic = "out-slice-k1"
    cluster.create_topic(topic, leaders=[1, 2])
    s = settings_for(cluster.bootstrap, topic, "slice_k1", delivery_timeout_ms=4000)
    tx = SliceTransaction(s, 0)
    try:
        tx.open()  # initialised while both brokers answer
        with cluster.second_paused(), pytest.raises(ProduceFailedError) as failed:
            tx.write(0, iter([arrow(range(20), [i % 2 for i in range(20)])]))
    finally:
        tx.close()

    assert failed.value.partitions == {1}
    assert SliceTransaction(s, 0).recorded() is None
    assert kafka.consume_all(cluster.bootstrap, topic, timeout_s=15) == []


# -- the query ----------------------------------------------------------------------------
def producer_ids_writing(bootstrap: str, topic: str) -> set[int]:
    """Producer ids the partition leaders of ``topic`` know as having written to it."""
    from kafka import TopicPartition

    with kafka_clients.admin(bootstrap) as admin:
        got = admin.describe_producers([TopicPartition(topic, p) for p in range(3)])
    return {p.producer_id for state in got.values() for p in state.active_producers}


def producer_id_of(bootstrap: str, transactional_id: str) -> int:
    with kafka_clients.admin(bootstrap) as admin:
        return admin.describe_transactions([transactional_id])[transactional_id].producer_id


def test_no_record_passes_the_driver_with_a_transaction_per_slice(
    spark, kafka_bootstrap, events_topic, new_topic, tmp_path
):
    """Who wrote the output, as the brokers know it (DescribeProducers): only the tasks'
    transactional ids (``...s<i>``), never the driver's (``...commit``, which only records the
    run epoch and the batches). PySpark runs a data source's commit in a Python worker of the
    driver, so counting sends in the test process would prove nothing."""
    out = new_topic("eo-slice", partitions=3)
    sink_id = "nodriver_slice"
    forward_events(
        spark, kafka_bootstrap, events_topic, out, sink_id=sink_id, checkpoint=str(tmp_path / "chk")
    )

    want = Counter(
        r.value for r in forward(kafka.read_batch(spark, kafka_bootstrap, events_topic)).collect()
    )
    assert values(kafka_bootstrap, out) == want and sum(want.values()) == EVENTS
    recorded = SinkProgress(kafka_bootstrap, out, sink_id).read()
    assert recorded is not None and recorded.batch_id == EVENTS // MAX_OFFSETS - 1
    s = settings_for(kafka_bootstrap, out, sink_id)
    driver = producer_id_of(kafka_bootstrap, s.names.commit_id)
    writers = producer_ids_writing(kafka_bootstrap, out)
    tasks = {producer_id_of(kafka_bootstrap, s.names.slice_id(i)) for i in range(recorded.slices)}
    assert driver not in writers and writers and writers <= tasks


def sliced_args(topic, out, tmp_path, profile="test", sink_id="eo_sliced"):
    return [
        "--profile", profile, "--topic", topic, "--out", out, "--mode", "two_phase",
        "--sink-id", sink_id, "--checkpoint", str(tmp_path / "chk"),
        "--max-offsets-per-trigger", str(MAX_OFFSETS),
    ]  # fmt: skip


@pytest.fixture(scope="module")
def expected(spark, kafka_bootstrap, events_topic) -> Counter:
    rows = forward(kafka.read_batch(spark, kafka_bootstrap, events_topic)).collect()
    return Counter(r.value for r in rows)


RETRIED_STEPS = (2, 3)
SLICED_POINTS = [
    f"{KAFKA_SLICED.point(1)}@0",  # initialised, nothing written
    f"{KAFKA_SLICED.point(2)}@1",  # a slice flushed into its open transaction
    f"{KAFKA_SLICED.point(3)}@1",  # a slice committed, the batch not recorded
    f"{KAFKA_SLICED.point(4)}@2",  # recorded, Spark's commit log not
]


@pytest.fixture(scope="module")
def job_runs(request, kafka_bootstrap, events_topic, tmp_path_factory) -> dict[str, Future]:
    """The job processes of the query's crash tests, two sequences at a time: each sequence
    has its own output topic, checkpoint and sink id (a sink id names the transactional ids)."""

    def out_topic(prefix: str) -> str:
        return unique_topic(kafka_bootstrap, prefix, partitions=3)

    def retried() -> dict[int, tuple[str, JobRun]]:
        runs = {}
        for step in RETRIED_STEPS:
            out, root = out_topic(f"sliced-retry{step}"), tmp_path_factory.mktemp(f"retry{step}")
            args = sliced_args(events_topic, out, root, "faults", sink_id=f"eo_sliced_retry{step}")
            fault = f"{KAFKA_SLICED.point(step)}@1:raise"
            runs[step] = (out, run_job(JOB, args, fault=fault, timeout_s=JOB_TIMEOUT_S))
        return runs

    def killed_at_every_step() -> str:
        out, root = out_topic("sliced-kill"), tmp_path_factory.mktemp("every-step")
        kill_at_each_point(JOB, sliced_args(events_topic, out, root), SLICED_POINTS)
        return out

    return start_selected(
        request,
        {
            "test_a_task_failing_after_each_slice_step_is_retried_and_writes_each_record_once": (
                retried
            ),
            "test_sliced_kafka_sink_killed_at_every_step_writes_each_record_once": (
                killed_at_every_step
            ),
        },
    )


@pytest.mark.crash
@pytest.mark.parametrize("step", RETRIED_STEPS)
def test_a_task_failing_after_each_slice_step_is_retried_and_writes_each_record_once(
    kafka_bootstrap, job_runs, expected, step
):
    """Step 2: attempt 0's records are flushed into its open transaction, then the task
    fails; step 3: attempt 0 committed its slice, then the task fails. Attempt 1 fences it
    (2) or finds the slice committed and skips it (3)."""
    name = "test_a_task_failing_after_each_slice_step_is_retried_and_writes_each_record_once"
    out, run = job_runs[name].result()[step]

    assert run.ok, run.output_tail
    assert run.fired(KAFKA_SLICED.point(step), "raise")
    assert values(kafka_bootstrap, out) == expected


@pytest.mark.crash
def test_sliced_kafka_sink_killed_at_every_step_writes_each_record_once(
    kafka_bootstrap, job_runs, expected
):
    out = job_runs["test_sliced_kafka_sink_killed_at_every_step_writes_each_record_once"].result()

    assert values(kafka_bootstrap, out) == expected
    recorded = SinkProgress(kafka_bootstrap, out, "eo_sliced").read()
    assert recorded is not None and recorded.batch_id == EVENTS // MAX_OFFSETS - 1


def test_a_slice_outliving_the_transaction_timeout_raises_a_typed_error_naming_it(
    kafka_bootstrap, new_topic, monkeypatch
):
    """K5 per slice: the broker aborts a transaction older than ``transaction_timeout_ms``;
    the task fails with an error naming the setting (Spark retries the task: the bound is one
    task's slice, not the batch) and neither records nor slice record are committed."""
    from spark_ext.sinks.errors import TransactionExpiredError

    topic = new_topic("slice-k5", partitions=2)
    s = settings_for(kafka_bootstrap, topic, "slice_k5", transaction_timeout_ms=1000)
    # The broker looks for expired transactions every 10 s (its default): sleep past that.
    monkeypatch.setenv("SPARK_EXT_FAULT", f"{KAFKA_SLICED.point(2)}@0:sleep=13")

    with pytest.raises(TransactionExpiredError) as err:
        write_slice(s, 0, 0, arrow(range(5)))

    assert "transaction_timeout_ms=1000" in str(err.value)
    assert SliceTransaction(s, 0).recorded() is None
    assert kafka.consume_all(kafka_bootstrap, topic) == []


def test_a_row_naming_a_missing_partition_raises_and_aborts_the_slice(kafka_bootstrap, new_topic):
    """A typed error, the slice's transaction aborted (the rows before the bad one never
    become visible), and the slice's next transaction commits normally."""
    from spark_ext.sinks.errors import PartitionOutOfRangeError

    topic = new_topic("slice-badpart", partitions=2)
    s = settings_for(kafka_bootstrap, topic, "slice_badpart")

    with pytest.raises(PartitionOutOfRangeError) as err:
        write_slice(s, 0, 0, arrow(range(3), [0, 1, 7]))
    write_slice(s, 0, 0, arrow(range(10, 12), [0, 1]))

    assert err.value.partition == 7
    assert values(kafka_bootstrap, topic) == Counter({"v-10": 1, "v-11": 1})


def test_a_task_of_an_older_driver_is_refused_before_it_can_fence_the_live_one(
    kafka_bootstrap, new_topic
):
    """A start records a new run epoch; a task still carrying the older epoch (a driver that
    kept running after a newer start) stops with ``DriverFencedError`` before
    ``init_transactions``, so the live driver's open slice transaction survives."""
    import dataclasses

    from spark_ext.sinks.errors import DriverFencedError

    topic = new_topic("slice-zombie", partitions=1)
    old = recover_slices(settings_for(kafka_bootstrap, topic, "slice_zombie"))
    new = recover_slices(settings_for(kafka_bootstrap, topic, "slice_zombie"))
    assert new.run_epoch == old.run_epoch + 1
    live = SliceTransaction(new, 0)
    producer = live.open()
    producer.begin()
    producer.send(None, b"live", None)
    producer.flush(0)

    with pytest.raises(DriverFencedError):
        SliceTransaction(dataclasses.replace(old), 0).open()

    producer.commit(
        new.names.slice_group(0), 0, '{"sink": "slice_zombie", "batch": 0, "digests": []}'
    )
    live.close()
    assert values(kafka_bootstrap, topic) == Counter({"live": 1})


def test_a_kept_producer_another_worker_fenced_is_replaced_and_the_slice_written_once(
    kafka_bootstrap, new_topic, caplog
):
    """Spark runs a slice's tasks in whichever Python worker is free: worker A keeps the
    slice's producer after batch 0, worker B initialises the slice for batch 1 (fencing A's),
    and batch 2 runs in A again. A's kept producer must be found stale before any record is
    read, and replaced (found by the random-kill test: the task failed with WriterFencedError).

    This is the ordinary path of a running query (the idle benchmark took it in most batches),
    so it must not warn: the stale producer is closed, not aborted (a fenced producer's abort
    always fails; B's ``init_transactions`` already ended A's transactions), and librdkafka's
    lines about the expected fence are INFO, not ``FATAL`` errors in every batch's log."""
    from connectors.kafka import slices as kafka_sink_slices

    topic = new_topic("slice-kept", partitions=2)
    s = settings_for(kafka_bootstrap, topic, "slice_kept")
    tid = s.names.slice_id(0)
    write_slice(s, 0, 0, arrow(range(0, 5)))
    worker_a = kafka_sink_slices._IDLE.pop(tid)  # worker A keeps its producer

    write_slice(s, 0, 1, arrow(range(5, 10)))  # worker B: a fresh producer fences A's
    kafka_sink_slices._IDLE.pop(tid).close()
    kafka_sink_slices._IDLE[tid] = worker_a  # batch 2 runs in worker A
    with caplog.at_level(logging.INFO):
        third = write_slice(s, 0, 2, arrow(range(10, 15)))
    # this sink's lines, librdkafka's included (``connectors.librdkafka``)
    ours = [r for r in caplog.records if r.name.startswith("connectors")]
    assert not [r.getMessage() for r in ours if r.levelno >= logging.WARNING]

    assert third.skipped is False
    assert kafka_sink_slices._IDLE[tid] is not worker_a  # replaced, the fresh one kept
    assert values(kafka_bootstrap, topic) == Counter(f"v-{i}" for i in range(15))
