"""The idempotent Kafka sink under task-level faults, run as the Kafka -> Kafka job.

* K2: a task that fails after part of its records are in the topic is retried
  (profile ``faults``: ``local[2,2]``); the retry must not re-send what attempt 0 sent.
* K3: two tasks of a batch with identical records (three input partitions with the same
  payloads, forwarded unchanged); a replay after a kill must not mistake one for the other.

Output is compared with the input, record for record, as a ``read_uncommitted`` consumer
sees it (the idempotent sink uses no transactions). The two tests' job processes run two at a
time (:func:`tests.conftest.start_selected`).
"""

from __future__ import annotations

from collections import Counter
from concurrent.futures import Future

import pytest

from connectors import kafka
from jobs.exactly_once_kafka import forward
from spark_ext.jobrun import JobRun, run_job
from spark_ext.recovery.kills import JOB_TIMEOUT_S, kill_at_each_point
from spark_ext.sinks.protocol import KAFKA_IDEMPOTENT
from tests.conftest import start_selected, unique_topic
from tests.connectors.conftest import EVENTS, MAX_OFFSETS

pytestmark = [pytest.mark.integration, pytest.mark.crash]

JOB = "jobs.exactly_once_kafka"
PARTIAL = KAFKA_IDEMPOTENT.point(2)


RETRIED = "test_idempotent_kafka_sink_task_retried_after_a_partial_write_sends_each_record_once"
IDENTICAL = "test_idempotent_kafka_sink_replay_tells_apart_tasks_with_identical_records"


def job_args(topic, out, root, profile, sink_id, *extra):
    return [
        "--profile", profile, "--topic", topic, "--out", out, "--mode", "idempotent",
        "--sink-id", sink_id, "--checkpoint", str(root / "chk"),
        "--max-offsets-per-trigger", str(MAX_OFFSETS), *extra,
    ]  # fmt: skip


def output(bootstrap, topic) -> Counter:
    got = kafka.consume_all(bootstrap, topic, read_committed=False)
    return Counter((key, value) for _, _, key, value in got)


def same_payload_records() -> list[tuple[bytes, bytes, int]]:
    """Three partitions holding the same (key, value) sequence: identical task slices."""
    per_partition = EVENTS // 3
    return [
        (f"k{i}".encode(), f"payload-{i}".encode(), p)
        for p in range(3)
        for i in range(per_partition)
    ]


@pytest.fixture(scope="module")
def job_runs(request, kafka_bootstrap, events_topic, tmp_path_factory) -> dict[str, Future]:
    """Both tests' job processes, the two at a time; each has its own topics, checkpoint and
    sink id (a sink id names the sink's consumer groups)."""

    def topic(prefix: str) -> str:
        return unique_topic(kafka_bootstrap, prefix, partitions=3)

    def retried() -> tuple[str, JobRun]:
        out, root = topic("idem-retry"), tmp_path_factory.mktemp("idem-retry")
        args = job_args(events_topic, out, root, "faults", "eo_idem_retry")
        return out, run_job(JOB, args, fault=f"{PARTIAL}@1:raise", timeout_s=JOB_TIMEOUT_S)

    def identical() -> str:
        source, out = topic("same-payload"), topic("idem-same")
        kafka.produce(kafka_bootstrap, source, same_payload_records())
        root = tmp_path_factory.mktemp("idem-same")
        args = job_args(source, out, root, "test", "eo_idem_same", "--payload-only")
        kill_at_each_point(JOB, args, [f"{PARTIAL}@1"])
        return out

    return start_selected(request, {RETRIED: retried, IDENTICAL: identical})


def test_idempotent_kafka_sink_task_retried_after_a_partial_write_sends_each_record_once(
    spark, kafka_bootstrap, events_topic, job_runs
):
    rows = forward(kafka.read_batch(spark, kafka_bootstrap, events_topic)).collect()
    expected = Counter((r.key.encode() if r.key else None, r.value.encode()) for r in rows)
    out, run = job_runs[RETRIED].result()

    assert run.ok, run.output_tail
    assert run.fired(PARTIAL, "raise")
    assert output(kafka_bootstrap, out) == expected
    assert sum(expected.values()) == EVENTS


def test_idempotent_kafka_sink_replay_tells_apart_tasks_with_identical_records(
    kafka_bootstrap, job_runs
):
    out = job_runs[IDENTICAL].result()
    assert output(kafka_bootstrap, out) == Counter((k, v) for k, v, _ in same_payload_records())
