"""The idempotent Kafka sink driven in-process (its ``foreachBatch`` function called with batch
DataFrames): batch order (X1), trimmed output (K4), many partitions (K6), start-up checks.

Real Spark, the real shared broker; every test on topics of its own.
"""

from __future__ import annotations

import pytest
from kafka import KafkaProducer, TopicPartition

from connectors import kafka
from connectors.kafka.idempotent import KafkaIdempotentWriter
from connectors.kafka.progress import SinkProgress
from connectors.kafka.records import RECORD_ID_HEADER, existing_topics
from connectors.sinks import exactly_once_to_kafka
from spark_ext import kafka_clients
from spark_ext.sinks.errors import (
    BatchRegressionError,
    ReplayUnprovableError,
    SinkConfigError,
    TopicMissingError,
)

pytestmark = pytest.mark.integration
#: The query that owns the sinks these tests call outside a streaming query.
OWNER = "7d1c4c02-4b8e-4d0b-9d55-0a5c3b1f6e10"


def rows(spark, n: int, tag: str = "a", partitions: int = 2):
    """A batch of ``n`` rows named by made-up input coordinates ``in/<tag>/<i>``."""
    data = [(f"k{i}", f"{tag}{i}", f"in/{tag}/{i}") for i in range(n)]
    return spark.createDataFrame(data, "key string, value string, record_id string").repartition(
        partitions
    )


def values(bootstrap: str, topic: str) -> list[bytes]:
    return sorted(v for _, _, _, v in kafka.consume_all(bootstrap, topic, read_committed=False))


def test_idempotent_kafka_sink_refuses_a_batch_below_the_recorded_one_and_writes_nothing(
    spark, kafka_bootstrap, new_topic
):
    """X1: a lower batch id (checkpoint reset, second query, zombie) is a typed error."""
    out = new_topic("idem-x1", partitions=2)
    writer = KafkaIdempotentWriter(kafka_bootstrap, out, "idem_x1", owner=OWNER)
    writer(rows(spark, 4), 5)
    written = values(kafka_bootstrap, out)
    assert len(written) == 4

    with pytest.raises(BatchRegressionError) as err:
        writer(rows(spark, 4, tag="b"), 3)
    assert (err.value.batch_id, err.value.recorded) == (3, 5)
    writer(rows(spark, 4), 5)  # the recorded batch itself: a replay, skipped

    assert values(kafka_bootstrap, out) == written
    assert SinkProgress(kafka_bootstrap, out, "idem_x1").read().batch_id == 5


def test_idempotent_kafka_sink_refuses_a_replay_whose_output_was_trimmed(
    spark, kafka_bootstrap, new_topic
):
    """K4: records of the re-run batch written by an earlier run were trimmed (retention,
    delete_records) below the log start: what is already there cannot be proven, so the sink
    raises instead of seeking with ``auto_offset_reset='latest'`` and finding nothing."""
    out = new_topic("idem-k4", partitions=1)
    writer = KafkaIdempotentWriter(kafka_bootstrap, out, "idem_k4", owner=OWNER)
    writer(rows(spark, 3, partitions=1), 0)  # recorded: batch 0, partition 0 ends at 3
    producer = KafkaProducer(bootstrap_servers=kafka_bootstrap)
    for i in range(2):  # an earlier run of batch 1 wrote two records, then died
        rid = f"idem_k4/1/in/b/{i}"
        producer.send(out, key=rid.encode(), value=f"b{i}".encode(), partition=0,
                      headers=[(RECORD_ID_HEADER, rid.encode())])  # fmt: skip
    producer.flush()
    producer.close()
    with kafka_clients.admin(kafka_bootstrap) as admin:
        admin.delete_records({TopicPartition(out, 0): 4})  # one of them is trimmed

    with pytest.raises(ReplayUnprovableError) as err:
        writer(rows(spark, 3, tag="b", partitions=1), 1)

    assert err.value.trimmed == {0: (3, 4)}
    assert values(kafka_bootstrap, out) == [b"b1"]  # nothing more written
    assert SinkProgress(kafka_bootstrap, out, "idem_k4").read().batch_id == 0


def test_idempotent_kafka_sink_records_batches_on_a_topic_with_many_partitions(
    spark, kafka_bootstrap, new_topic
):
    """K6: the end offsets of 480 partitions did not fit the broker's 4096-byte offset
    metadata, so every batch failed; they are now one committed offset per partition."""
    out = new_topic("idem-k6", partitions=480)
    try:
        writer = KafkaIdempotentWriter(kafka_bootstrap, out, "idem_k6", owner=OWNER)
        writer(rows(spark, 20), 0)
        writer(rows(spark, 20, tag="b"), 1)
        writer(rows(spark, 20, tag="b"), 1)  # replay: skipped

        recorded = SinkProgress(kafka_bootstrap, out, "idem_k6").read()
        assert recorded.batch_id == 1
        assert len(recorded.end_offsets) == 480 and sum(recorded.end_offsets.values()) == 40
        assert len(values(kafka_bootstrap, out)) == 40
    finally:
        with kafka_clients.admin(kafka_bootstrap) as admin:
            admin.delete_topics([out])


def stream(spark):
    return (
        spark.readStream.format("rate")
        .option("rowsPerSecond", 1)
        .load()
        .selectExpr("cast(value as string) as value", "cast(value as string) as record_id")
    )


def test_kafka_sink_with_a_missing_output_topic_fails_at_start_naming_it(
    spark, kafka_bootstrap, tmp_path
):
    """The broker would auto-create the topic with one partition and the sink write to it."""
    missing = f"no-such-topic-{tmp_path.name}"
    for mode in ("two_phase", "idempotent"):
        with pytest.raises(TopicMissingError) as err:
            exactly_once_to_kafka(stream(spark), missing, bootstrap=kafka_bootstrap,
                                  sink_id="missing", checkpoint=str(tmp_path / mode), mode=mode)  # fmt: skip
        assert err.value.topic == missing and missing in str(err.value)
    assert missing not in existing_topics(kafka_bootstrap)


def test_idempotent_kafka_sink_needs_rows_named_by_their_input_coordinates(
    spark, kafka_bootstrap, new_topic, tmp_path
):
    """K3: record ids come from a ``record_id`` column, never from a digest of a task's rows."""
    out = new_topic("idem-noid", partitions=1)
    with pytest.raises(SinkConfigError) as err:
        exactly_once_to_kafka(stream(spark).drop("record_id"), out, bootstrap=kafka_bootstrap,
                              sink_id="noid", checkpoint=str(tmp_path), mode="idempotent")  # fmt: skip
    assert err.value.setting == "df.record_id"


def test_a_task_run_again_at_attempt_zero_reads_back_what_it_sent_before(
    kafka_bootstrap, new_topic, monkeypatch
):
    """A stage re-attempted after a fetch failure runs its tasks again at attempt 0 (PySpark
    does not expose the stage attempt), so "attempt > 0" cannot tell a re-run. The task's own
    durable start marker can: the second run of the same task and batch reads back first."""
    import pyarrow as pa

    from connectors.kafka.idempotent import PARTIAL, OutputRegion, SliceWriter
    from connectors.kafka.settings import KafkaSinkSettings
    from spark_ext.crash import InjectedFault

    topic = new_topic("idem-rerun", partitions=2)
    settings = KafkaSinkSettings(kafka_bootstrap, topic, "idem_rerun")
    writer = SliceWriter(settings, 3, OutputRegion({0: 0, 1: 0}, dirty=False))
    rows = pa.RecordBatch.from_pydict(
        {"value": [f"v{i}" for i in range(10)], "record_id": [f"in/0/{i}" for i in range(10)]}
    )
    monkeypatch.setenv("SPARK_EXT_FAULT", f"{PARTIAL.name}@3:raise")
    with pytest.raises(InjectedFault):
        list(writer(iter([rows])))  # the first record is in the topic, then the task fails
    monkeypatch.delenv("SPARK_EXT_FAULT")

    list(writer(iter([rows])))  # the same task again, attempt 0 (TaskContext says so)

    got = sorted(v.decode() for _, _, _, v in kafka.consume_all(kafka_bootstrap, topic))
    assert got == sorted(f"v{i}" for i in range(10))
