"""Tracker vs Spark watermark windows: rows dropped, report traffic, tracked vs untracked rows/s."""

from __future__ import annotations

import json
import time
import uuid

from pyspark.sql import functions as F

from benchmarks.common import BenchContext, Figure
from connectors.kafka import create_topic, produce, read_stream
from jobs.tracker_windows import event, marker, parse
from spark_ext.operators import Count, WindowAggregate
from spark_ext.tracker import LocalTrackingAgent, Tumbling
from spark_ext.tracker.pipeline import Closing, ForeachSink, TrackedStream

PARTITIONS = 4
SLOW = PARTITIONS - 1  # the slow partition lags LAG_S seconds of event time behind the others
LAG_S = 30
DELAY = "20 seconds"  # watermark delay: larger than the in-partition disorder, smaller than the lag


def _input(n: int) -> list[tuple[bytes | None, bytes, int]]:
    """n events, 10 per second of event time, slightly out of order in each partition; the
    slow partition's events are written LAG_S later (in write order) than their time says."""
    fast, slow = [], []
    for i in range(n):
        p = i % PARTITIONS
        t_ms = i * 100 + (300 if i % 7 == 0 else 0)  # small in-partition disorder
        rec = (f"u{i % 50}".encode(), event(f"u{i % 50}", 1.0, t_ms), p)
        (slow if p == SLOW else fast).append((i, rec))
    ordered = sorted(fast + [(i + LAG_S * 10, r) for i, r in slow], key=lambda x: x[0])
    end_ms = n * 100 + 60_000
    return [r for _, r in ordered] + [(None, marker(end_ms), p) for p in range(PARTITIONS)]


def run(ctx: BenchContext) -> list[Figure]:
    spark = ctx.spark
    n = ctx.n(20_000)
    topic = f"bench-tracker-{uuid.uuid4().hex[:6]}"
    create_topic(ctx.bootstrap, topic, PARTITIONS)
    produce(ctx.bootstrap, topic, _input(n))
    per_trigger = max(500, n // 20)
    figures: list[Figure] = []

    # Spark's watermark windows
    folder = ctx.folder("tracker_wm")
    events = parse(read_stream(spark, ctx.bootstrap, topic, max_offsets_per_trigger=per_trigger))
    wm = (
        events.where("event_time is not null")
        .withWatermark("event_time", DELAY)
        .groupBy(F.window("event_time", "10 seconds"), "user_id")
        .count()
        .writeStream.format("memory")
        .queryName(f"bench_wm_{uuid.uuid4().hex[:6]}")
        .option("checkpointLocation", str(folder / "chk"))
        .start()
    )
    t0 = time.monotonic()
    wm.processAllAvailable()
    wm_s = time.monotonic() - t0
    emitted = spark.table(wm.name).agg(F.sum("count")).first()[0] or 0
    wm.stop()

    # Tracked windows
    folder = ctx.folder("tracker_tr")
    agent = LocalTrackingAgent(folder / "agent")
    out: list[int] = []
    q = (
        TrackedStream(
            parse(read_stream(spark, ctx.bootstrap, topic, max_offsets_per_trigger=per_trigger)),
            key="user_id",
            event_time="event_time",
            agent=agent,
            closing=Closing.partitions(topic, PARTITIONS, ordered=False),
            close_marker="close_through",
        )
        .apply(Tumbling("10 seconds", namespace="bench"), WindowAggregate(Count()))
        .start(
            ForeachSink(lambda df, _b: out.append(df.agg(F.sum("count")).first()[0] or 0)),
            checkpoint=str(folder / "chk"),
            trigger={"processingTime": "0 seconds"},
        )
    )
    t0 = time.monotonic()
    while agent.state().open_substreams() or not out:
        q.processAllAvailable()
    q.processAllAvailable()
    tr_s = time.monotonic() - t0
    q.stop()
    tracked_rows = sum(out)
    reports = 0
    for line in (folder / "agent" / "tracker.log").read_text().splitlines():
        rec = json.loads(line)
        reports += len(rec.get("reports", []))
    k = len(agent.end_events(0, 10**9))

    figures += [
        Figure(
            "tracker",
            "spark watermark",
            "rows dropped",
            n - emitted,
            "rows",
            baseline=True,
            note=f"delay {DELAY}; includes windows never closed",
        ),
        Figure("tracker", "tracker", "rows dropped", n - tracked_rows, "rows"),
        Figure("tracker", "spark watermark", "wall time", wm_s, "s", baseline=True),
        Figure("tracker", "tracker", "wall time", tr_s, "s", note="incl. flush batches"),
        Figure(
            "tracker",
            "tracker",
            "report messages",
            reports,
            "msgs",
            note=f"K={k} windows, P={PARTITIONS}",
        ),
        Figure(
            "tracker",
            "punctuations K*P^2",
            "report messages",
            k * PARTITIONS**2,
            "msgs",
            baseline=True,
        ),
    ]
    return figures
