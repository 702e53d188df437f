"""The standalone dedup operator on a stream: Bloom in state, Delta catalog behind it."""

from __future__ import annotations

import pytest
from pyspark.sql import functions as F

from connectors import kafka
from spark_ext.dedup import DedupConfig, DedupSink, deduplicate
from tests.conftest import await_done

pytestmark = pytest.mark.integration

N, DUP_EVERY = 300, 10


def test_stream_with_redelivered_records_is_written_once_per_id(
    spark, kafka_bootstrap, new_topic, tmp_path
):
    topic = new_topic("dedup", partitions=2)
    records = [(None, f"r{i:05d}".encode(), i % 2) for i in range(N)]
    # Redelivered: the same id once more, right away (same batch) or at the end (a later batch).
    for i in range(0, N, DUP_EVERY):
        copy = (None, f"r{i:05d}".encode(), (i + 1) % 2)
        if i % (2 * DUP_EVERY):
            records.insert(records.index((*copy[:2], i % 2)) + 1, copy)
        else:
            records.append(copy)
    kafka.produce(kafka_bootstrap, topic, records)

    source = kafka.read_stream(spark, kafka_bootstrap, topic, max_offsets_per_trigger=120)
    rows = source.select(
        F.col("value").alias("record_id"),
        F.to_timestamp(F.lit("2026-01-01 00:00:00")).alias("event_time"),
        "topic",
        "partition",
        "offset",
    )
    config = DedupConfig(
        catalog_path=str(tmp_path / "catalog"), capacity=1000, fp_rate=0.01, buckets=2
    )
    sink = DedupSink(config, str(tmp_path / "out"), sink_id="dedup_test")
    query = (
        deduplicate(rows, config)
        .writeStream.foreachBatch(sink)
        .option("checkpointLocation", str(tmp_path / "chk"))
        .trigger(availableNow=True)
        .start()
    )
    await_done(query, 600)
    assert query.exception() is None

    out = spark.read.format("delta").load(str(tmp_path / "out"))
    assert out.count() == out.select("record_id").distinct().count() == N
    m = sink.metrics
    assert m.rows == N + N // DUP_EVERY
    assert m.catalog_duplicates + m.batch_duplicates == N // DUP_EVERY
    assert m.catalog_duplicates > 0, "copies in a later batch are found in the catalog"
    assert m.batch_duplicates > 0, "copies in the same batch are found in memory"
    assert 0.5 < m.lookups_avoided < 1.0
    assert m.observed_fp_rate <= 0.05
    assert 0 < m.state_bytes < 10_000
