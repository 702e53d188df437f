"""The tracker closes windows that Spark's watermark drops rows from or never closes.

Same input for both queries, two partitions:
  phase 1  partition 0: one event per second, t = 0..59 s; partition 1 (slow): t = 0..9 s
  phase 2  partition 1 catches up: t = 10..29 s; then both partitions go idle, each after
           a close marker from its producer ("nothing before 60 s any more").
Spark (watermark delay 10 s): after phase 1 the watermark is 49 s, so phase 2's rows are
late and silently dropped, and with no newer data windows [40, 50) and [50, 60) are never
emitted. The tracker waits for the slow partition and closes every window, with every row.
"""

from __future__ import annotations

import pandas as pd
import pytest
from chispa import assert_df_equality
from pyspark.sql import functions as F

from connectors.kafka import produce, read_stream
from jobs.tracker_windows import EPOCH, event, marker, parse
from spark_ext.streaming import Closing
from spark_ext.tracker import LocalTrackingAgent
from tests.spark_ext.streaming.conftest import count_per_window

pytestmark = pytest.mark.integration

EPOCH_MS = int(EPOCH.timestamp() * 1000)
PHASE1 = [(0, s) for s in range(60)] + [(1, s) for s in range(10)]
PHASE2 = [(1, s) for s in range(10, 30)]


def records(events, markers_through_s=None):
    out = [(b"k", event(f"u{s % 3}", 1.0, s * 1000), p) for p, s in events]
    if markers_through_s is not None:
        out += [(None, marker(markers_through_s * 1000), p) for p in (0, 1)]
    return out


def expected(spark):
    df = pd.DataFrame([{"key": f"u{s % 3}", "s": s} for _, s in PHASE1 + PHASE2])
    df["window_start_ms"] = EPOCH_MS + df["s"] // 10 * 10_000
    out = df.groupby(["window_start_ms", "key"]).size().rename("count").reset_index()
    out["window_end_ms"] = out["window_start_ms"] + 10_000
    return spark.createDataFrame(out[["window_start_ms", "window_end_ms", "key", "count"]])


def test_tracker_emits_late_rows_and_idle_windows_that_the_watermark_drops_or_stalls(
    spark, kafka_bootstrap, new_topic, tmp_path
):
    topic = new_topic("trk-vs-wm", partitions=2)
    events = parse(read_stream(spark, kafka_bootstrap, topic))

    watermark = (
        events.where("event_time is not null")
        .withWatermark("event_time", "10 seconds")
        .groupBy(F.window("event_time", "10 seconds"), F.col("user_id").alias("key"))
        .count()
        .select(
            F.unix_millis("window.start").alias("window_start_ms"),
            F.unix_millis("window.end").alias("window_end_ms"),
            "key",
            "count",
        )
        .writeStream.format("memory")
        .queryName("spark_watermark_windows")
        .outputMode("append")
        .option("checkpointLocation", str(tmp_path / "wm_chk"))
        .start()
    )
    agent = LocalTrackingAgent(tmp_path / "tracker")
    closing = Closing.partitions(topic, 2, ordered=True)
    windows, tracked = count_per_window(events, agent, closing, "vs_wm", tmp_path)
    try:
        produce(kafka_bootstrap, topic, records(PHASE1))
        for q in (watermark, tracked):
            q.processAllAvailable()
        produce(kafka_bootstrap, topic, records(PHASE2, markers_through_s=60))
        for _ in range(2):  # the tracker's flush batch, Spark's no-data batch
            for q in (watermark, tracked):
                q.processAllAvailable()
        progress = watermark.lastProgress
    finally:
        watermark.stop()
        tracked.stop()

    want = expected(spark)
    got = spark.read.format("delta").load(str(tmp_path / "windows"))
    assert_df_equality(got, want, ignore_row_order=True, ignore_nullable=True)

    spark_rows = spark.table("spark_watermark_windows")
    spark_total = spark_rows.agg(F.sum("count")).first()[0]
    # Of the 90 rows Spark emitted 50: phase 2's 20 rows were dropped as late, and the 20 rows
    # of windows [40, 60) are stuck: no newer data comes to move the watermark past 60 s.
    assert spark_total == 50
    emitted_starts = {r[0] for r in spark_rows.select("window_start_ms").distinct().collect()}
    assert emitted_starts == {EPOCH_MS + s * 1000 for s in (0, 10, 20, 30)}
    assert progress["eventTime"]["watermark"].startswith("2026-01-01T00:00:49")
    # ...while the tracker emitted all 90 rows in all six windows.
    assert got.agg(F.sum("count")).first()[0] == len(PHASE1) + len(PHASE2)
    # and its state is gone: no open substream, nothing in flight, six windows ended
    figures = windows.handler.figures
    assert (figures.open_substreams, figures.in_flight, figures.ended) == (0, 0, 6)
