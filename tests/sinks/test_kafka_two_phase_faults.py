"""The two-phase Kafka committer under broker faults: a partition that stops answering.

The committer runs in-process against a private two-broker cluster (the shared broker is never
paused); the records are staged in an Arrow file exactly as a task stages them.
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.ipc as ipc
import pytest
from kafka_two_brokers import two_brokers

from connectors import kafka
from connectors.kafka.sink import (
    IN_TRANSACTION,
    KafkaCommitter,
    KafkaSinkSettings,
    SinkProgress,
    StagedRecords,
)
from spark_ext.sinks.errors import (
    PartitionOutOfRangeError,
    ProduceFailedError,
    TransactionExpiredError,
)
from spark_ext.sinks.protocol import commit_batch

pytestmark = [pytest.mark.integration, pytest.mark.crash]

ROWS = 20


def stage(path, rows: int = ROWS) -> StagedRecords:
    """An Arrow file of ``rows`` records alternating between output partitions 0 and 1."""
    table = pa.table(
        {
            "key": [f"k{i}" for i in range(rows)],
            "value": [f"v{i}" for i in range(rows)],
            "partition": pa.array([i % 2 for i in range(rows)], pa.int32()),
        }
    )
    with pa.OSFile(str(path), "wb") as sink, ipc.new_file(sink, table.schema) as out:
        out.write_table(table)
    return StagedRecords(str(path), rows, 0, 0)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with two_brokers(tmp_path_factory.mktemp("two-brokers")) as c:
        yield c


@pytest.mark.heavy
@pytest.mark.every_mode
def test_two_phase_commit_of_a_batch_with_an_expired_produce_raises_and_records_nothing(
    cluster, tmp_path
):
    """K1: records to a partition whose leader is paused past ``delivery_timeout_ms`` expire;
    kafka-python would still commit the transaction without them and the batch would be
    recorded, so every replay is skipped. The committer must abort and raise instead."""
    cluster.create_topic("out-k1", leaders=[1, 2])
    settings = KafkaSinkSettings(
        bootstrap=cluster.bootstrap,
        topic="out-k1",
        sink_id="k1",
        staging_dir=str(tmp_path),
        delivery_timeout_ms=4000,
    )
    staged = stage(tmp_path / "p0.arrow")
    committer = KafkaCommitter(settings)
    try:
        committer.producer()  # initialised while both brokers answer
        with cluster.second_paused(), pytest.raises(ProduceFailedError) as failed:
            commit_batch(committer, 0, [staged])
    finally:
        committer.close()

    assert failed.value.partitions == {1}
    assert SinkProgress(cluster.bootstrap, "out-k1", "k1").read() is None
    assert kafka.consume_all(cluster.bootstrap, "out-k1", timeout_s=15) == []


def test_two_phase_commit_of_a_row_naming_a_missing_partition_raises_and_aborts(cluster, tmp_path):
    """A ``partition`` the topic lacks: a typed error, the transaction aborted (the records
    sent before that row never become visible), and the next batch commits normally."""
    cluster.create_topic("out-badpart", leaders=[1, 1])
    settings = KafkaSinkSettings(
        bootstrap=cluster.bootstrap,
        topic="out-badpart",
        sink_id="badpart",
        staging_dir=str(tmp_path),
    )
    bad = pa.table({"value": ["a", "b", "c"], "partition": pa.array([0, 1, 7], pa.int32())})
    path = tmp_path / "bad.arrow"
    with pa.OSFile(str(path), "wb") as sink, ipc.new_file(sink, bad.schema) as out:
        out.write_table(bad)
    committer = KafkaCommitter(settings)
    try:
        with pytest.raises(PartitionOutOfRangeError) as failed:
            commit_batch(committer, 0, [StagedRecords(str(path), 3, 0, 0)])
        assert failed.value.partition == 7
        assert SinkProgress(cluster.bootstrap, "out-badpart", "badpart").read() is None
        commit_batch(committer, 0, [stage(tmp_path / "good.arrow", rows=4)])
    finally:
        committer.close()

    got = kafka.consume_all(cluster.bootstrap, "out-badpart", timeout_s=15)
    assert sorted(value for _, _, _, value in got) == [b"v0", b"v1", b"v2", b"v3"]
    assert SinkProgress(cluster.bootstrap, "out-badpart", "badpart").read().batch_id == 0


@pytest.mark.heavy
@pytest.mark.every_mode
def test_two_phase_batch_outliving_the_transaction_timeout_raises_a_typed_error_naming_it(
    kafka_bootstrap, new_topic, tmp_path, monkeypatch
):
    """K5: the broker aborts a transaction older than ``transaction_timeout_ms``; the sink
    must not report that as a fenced writer (never retried): it retries the batch in a fresh
    transaction, and when that one expires too raises an error naming the setting."""
    topic = new_topic("k5", partitions=2)
    settings = KafkaSinkSettings(
        bootstrap=kafka_bootstrap,
        topic=topic,
        sink_id="k5",
        staging_dir=str(tmp_path),
        transaction_timeout_ms=1000,
    )
    # The broker looks for expired transactions every 10 s (its default): sleep past that.
    monkeypatch.setenv("SPARK_EXT_FAULT", f"{IN_TRANSACTION.name}@0:sleep=13")
    committer = KafkaCommitter(settings)
    try:
        with pytest.raises(TransactionExpiredError) as err:
            commit_batch(committer, 0, [stage(tmp_path / "p0.arrow")])
    finally:
        committer.close()

    assert "transaction_timeout_ms=1000" in str(err.value)
    assert err.value.elapsed_ms >= 1000
    assert SinkProgress(kafka_bootstrap, topic, "k5").read() is None
    assert kafka.consume_all(kafka_bootstrap, topic) == []
