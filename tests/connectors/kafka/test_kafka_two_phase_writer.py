"""The transaction-per-slice Kafka sink as a ``foreachBatch`` writer (``KafkaTwoPhaseWriter``).

A tracked query hands its results to a ``foreachBatch`` function; before this writer the only
exactly-once Kafka writer for it was the idempotent one, which refuses ``spark.speculation``.
"""

from __future__ import annotations

from collections import Counter

import pytest

from connectors import kafka
from connectors.kafka.sliced_writer import KafkaTwoPhaseWriter
from spark_ext.sinks.errors import BatchRegressionError, SinkConfigError

pytestmark = pytest.mark.integration
#: The query that owns the sinks these tests call outside a streaming query.
OWNER = "2f0b1f0e-54d4-4c53-8a0e-3c9f7c2b6a11"


def batch(spark, batch_id: int, n: int = 10):
    rows = [(f"k{i}", f"b{batch_id}-{i}", f"in/{batch_id}/{i}") for i in range(n)]
    return spark.createDataFrame(rows, "key string, value string, record_id string").repartition(2)


def values(bootstrap, topic) -> Counter:
    got = kafka.consume_all(bootstrap, topic, read_committed=True)
    return Counter(value.decode() for _, _, _, value in got)


def test_each_record_once_across_a_partly_written_batch_a_replay_and_a_restart(
    spark, kafka_bootstrap, new_topic
):
    topic = new_topic("tx-writer", partitions=2)
    first = KafkaTwoPhaseWriter(kafka_bootstrap, topic, "txw", owner=OWNER)
    first(batch(spark, 0), 0)
    # batch 1: every slice committed, then the driver dies before it records the batch
    settings = first._recovered(batch(spark, 1), 1)
    written = first.write_slices(batch(spark, 1), 1, settings)
    assert sorted(w.index for w in written) == [0, 1] and not any(w.skipped for w in written)

    restarted = KafkaTwoPhaseWriter(
        kafka_bootstrap, topic, "txw", owner=OWNER
    )  # a new run: recovers
    restarted(batch(spark, 1), 1)  # Spark re-runs batch 1: its slices are found committed
    restarted(batch(spark, 1), 1)  # and a replay of a recorded batch writes nothing
    restarted(batch(spark, 2), 2)
    want = Counter(f"b{b}-{i}" for b in range(3) for i in range(10))
    assert values(kafka_bootstrap, topic) == want

    with pytest.raises(BatchRegressionError):
        KafkaTwoPhaseWriter(kafka_bootstrap, topic, "txw", owner=OWNER)(batch(spark, 0), 0)
    with pytest.raises(SinkConfigError, match="record_id"):
        restarted(batch(spark, 3).drop("record_id"), 3)
    assert values(kafka_bootstrap, topic) == want


def test_a_failed_batch_is_recovered_before_the_same_writer_runs_it_again(
    spark, kafka_bootstrap, new_topic
):
    """A query restarted in-process keeps its writer: after a failed call the next one starts a
    new run (run epoch, open transactions aborted, committed slices read) before writing."""
    from pyspark.sql import functions as F

    topic = new_topic("tx-writer-fail", partitions=2)
    write = KafkaTwoPhaseWriter(kafka_bootstrap, topic, "txw_fail", owner=OWNER)
    write(batch(spark, 0), 0)
    epoch = write._settings.run_epoch
    with pytest.raises(Exception, match="PartitionOutOfRangeError"):
        write(batch(spark, 1).withColumn("partition", F.lit(7)), 1)  # the topic has 2
    write(batch(spark, 1), 1)
    assert write._settings.run_epoch > epoch
    assert values(kafka_bootstrap, topic) == Counter(
        f"b{b}-{i}" for b in range(2) for i in range(10)
    )
