"""DeltaDedupSink on a Kafka stream with redeliveries and bad records (Spark + Kafka + Delta)."""

from __future__ import annotations

import json

import pytest
from chispa import assert_df_equality
from pyspark.sql import functions as F

from connectors import kafka
from connectors.delta.dedup_sink import DeltaDedupSink
from jobs.dedup_delta import OUTPUT_COLUMNS, DedupPaths, start
from jobs.ordering_dedup import produce_readings, sensor_readings
from spark_ext.dedup import DedupConfig
from tests.conftest import await_done

pytestmark = pytest.mark.integration

SENSORS, PER_SENSOR, DUP_EVERY = 3, 40, 4


def test_redelivered_readings_are_written_once_and_bad_records_quarantined(
    spark, kafka_bootstrap, new_topic, tmp_path
):
    topic = new_topic("dedup-sink", partitions=2)
    produced = produce_readings(
        kafka_bootstrap,
        topic,
        sensors=SENSORS,
        per_sensor=PER_SENSOR,
        duplicate_every=DUP_EVERY,
        duplicate_delay=3,
    )
    bad = [
        (None, json.dumps({"sensor": "s9", "event_time": "2026-01-01T00:00:00Z"}).encode(), 0),
        (None, b"not json at all", 1),
        (None, json.dumps({"reading_id": "s9-x", "sensor": "s9"}).encode(), 1),
    ]
    kafka.produce(kafka_bootstrap, topic, bad)
    readings = [r for _, r in sensor_readings(SENSORS, PER_SENSOR, 2, DUP_EVERY, 3)]
    ids = {r["reading_id"] for r in readings if "reading_id" in r}
    duplicates = sum(1 for r in readings if "reading_id" in r) - len(ids)
    assert duplicates > 0 and produced == len(readings)

    paths = DedupPaths(tmp_path / "dedup")
    query, sink = start(spark, kafka_bootstrap, topic, paths, max_offsets_per_trigger=40)
    await_done(query, 600)
    assert query.exception() is None

    out = spark.read.format("delta").load(str(paths.unique))
    assert sorted(r["reading_id"] for r in out.select("reading_id").collect()) == sorted(ids)
    # The table reads back the same with delta-rs.
    from deltalake import DeltaTable

    via_rs = spark.createDataFrame(
        DeltaTable(str(paths.unique)).to_pandas(), schema=out.schema
    ).select(*OUTPUT_COLUMNS)
    assert_df_equality(
        out.select(*OUTPUT_COLUMNS), via_rs, ignore_row_order=True, ignore_nullable=True
    )

    m = sink.metrics
    assert m.rows == len(ids) + duplicates
    assert m.batch_duplicates + m.catalog_duplicates == duplicates
    assert m.batch_duplicates > 0 and m.catalog_duplicates > 0
    assert 0.5 < m.lookups_avoided < 1.0

    quarantined = spark.read.format("delta").load(str(paths.quarantine))
    reasons = sorted(r["_reason"] for r in quarantined.collect())
    assert reasons == [
        "null_dedup_key:event_time",
        "null_dedup_key:reading_id",
        "null_dedup_key:reading_id,event_time",
    ]
    catalog = spark.read.format("delta").load(str(paths.catalog))
    assert catalog.count() == catalog.select("record_id").distinct().count() == len(ids)
    assert catalog.where(F.col("coords").isNull()).count() == 0


def test_a_null_key_without_a_quarantine_stops_the_query_with_a_typed_error(
    spark, kafka_bootstrap, new_topic, tmp_path
):
    topic = new_topic("dedup-null", partitions=1)
    kafka.produce(kafka_bootstrap, topic, [(None, b"a", 0), (None, b"", 0)])
    rows = kafka.read_stream(spark, kafka_bootstrap, topic).select(
        F.when(F.length("value") > 0, F.col("value")).alias("record_id"),
        F.col("kafka_timestamp").alias("event_time"),
        "topic",
        "partition",
        "offset",
    )
    config = DedupConfig(catalog_path=str(tmp_path / "catalog"), capacity=100, buckets=1)
    sink = DeltaDedupSink(config, tmp_path / "out", "nulls", tmp_path / "state")
    query = (
        rows.writeStream.foreachBatch(sink)
        .option("checkpointLocation", str(tmp_path / "chk"))
        .trigger(availableNow=True)
        .start()
    )
    with pytest.raises(Exception, match="DedupInputError"):
        query.awaitTermination(600)
    # Nothing of the batch reached the output: its staged file was removed.
    from deltalake import DeltaTable

    assert DeltaTable(str(tmp_path / "out")).to_pyarrow_table().num_rows == 0
    assert not list((tmp_path / "out").glob("spark_ext-*.parquet"))
