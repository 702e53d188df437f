"""DeltaDedupSink at scale: the decision runs in the tasks, the driver holds nothing per row.

The driver gets one message per bucket (file names, sizes, counts, metrics) and commits; the
keys of the batch never reach it. Measured here as the driver's Python allocations (NumPy
arrays included, :mod:`tracemalloc`) during a batch, which must not grow with the batch's rows.
"""

from __future__ import annotations

import datetime as dt
import pickle
import tracemalloc
from pathlib import Path

import pytest
from pyspark.sql import functions as F

from connectors.delta.dedup_sink import DeltaDedupSink
from spark_ext.dedup import DedupConfig
from spark_ext.sinks.owner import SinkOwner

pytestmark = pytest.mark.integration

BUCKETS = 4
T0 = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)


def batch(spark, start: int, rows: int):
    """``rows`` readings with ids ``start``.. (every tenth a copy of the one before it)."""
    return spark.range(start, start + rows).select(
        F.concat(
            F.lit("r"), (F.col("id") - (F.col("id") % 10 == 9).cast("long")).cast("string")
        ).alias("reading_id"),
        (F.lit(T0) + F.make_interval(secs=(F.col("id") % 600).cast("int"))).alias("event_time"),
        F.lit("t").alias("topic"),
        (F.col("id") % 2).cast("int").alias("partition"),
        F.col("id").alias("offset"),
    )


def make_sink(root: Path) -> DeltaDedupSink:
    config = DedupConfig(
        catalog_path=str(root / "catalog"),
        capacity=1_000_000,
        buckets=BUCKETS,
        id_column="reading_id",
        coordinate_columns=("topic", "partition", "offset"),
    )
    return DeltaDedupSink(config, root / "out", "scale", root / "state", owner=SinkOwner("q-scale"))


def driver_peak(sink: DeltaDedupSink, df, batch_id: int) -> int:
    """Peak bytes the driver's Python allocated while the sink ran batch ``batch_id``."""
    tracemalloc.start()
    try:
        sink(df, batch_id)
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_driver_holds_no_per_row_data_and_gets_one_bounded_message_per_bucket(spark, tmp_path):
    small, large = 20_000, 400_000
    sink = make_sink(tmp_path)
    sink(batch(spark, 0, 1_000), 0)  # warm-up: table creation, route keys, Python workers

    peak_small = driver_peak(sink, batch(spark, 1_000, small), 1)
    messages_small = len(pickle.dumps(getattr(sink, "last_results", None)))
    peak_large = driver_peak(sink, batch(spark, 1_000 + small, large), 2)
    messages_large = len(pickle.dumps(getattr(sink, "last_results", None)))

    # 380k more rows: 8 bytes a row held anywhere on the driver would be 3 MB more.
    assert peak_large - peak_small < 1_000_000, (peak_small, peak_large)
    assert len(sink.last_results) == BUCKETS
    assert messages_large - messages_small < 200, (messages_small, messages_large)
    # And the batches were deduplicated: every tenth row was a copy of the one before it.
    out = spark.read.format("delta").load(str(tmp_path / "out"))
    total = 1_000 + small + large
    assert out.count() == out.select("reading_id").distinct().count() == total - total // 10
