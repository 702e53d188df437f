"""Tracker vs Spark watermark windows: rows dropped, latency, report traffic, tracked vs untracked rows/s.

(a) release latency from a window's closing record in Kafka to its row at the sink, both
queries on one live topic, the slow partition's lag fixed at LAG_S or varying 0..LAG_S (the
watermark's delay: the smallest that drops nothing); (b)-(d) every query on one topic written up
front. Run: ``scripts/bench.sh tracker [--scale 0.25] [--repeat 1]``; compare ratios, not
absolute seconds. ``SPARK_EXT_BENCH_TRACKER=throughput``: (b)-(d) alone at 1M events, 100,000
a batch (README, "Throughput, measured").
"""

from __future__ import annotations

import json
import os
import time
import uuid
from collections.abc import Callable, Iterator
from functools import partial
from typing import Any

import pandas as pd
from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.streaming.state import GroupStateTimeout

from benchmarks.common import BenchContext, Figure, drained, percentile, start_query
from benchmarks.tracker_pure import PARTITIONS, events
from connectors.kafka import create_topic, produce, read_stream
from jobs.tracker_windows import EPOCH, event, marker, parse
from spark_ext.operators import Count, WindowAggregate
from spark_ext.sinks.trigger import Trigger
from spark_ext.streaming import Closing, TrackedStream
from spark_ext.tracker import LocalTrackingAgent, Tumbling
from spark_ext.tracker.snapshot import log_generations, log_name

SLOW = PARTITIONS - 1  # the slow partition lags LAG_S seconds of event time behind the others
LAG_S = 30
DROP_DELAY = "20 seconds"  # (b): larger than the in-partition disorder, smaller than the lag
#: (a): the smallest whole-second delay under which the watermark drops < 1 % of rows
#: (the slow partition's rows arrive up to LAG_S + disorder behind the fast partitions).
LATENCY_DELAY = f"{LAG_S + 1} seconds"
WINDOW_MS = 10_000
EPOCH_MS = int(EPOCH.timestamp() * 1000)

Record = tuple[bytes | None, bytes, int]
#: ``(window_start_ms of a data row or None, record, close marker's through_ms or None)``
Item = tuple[int | None, Record, int | None]


def fixed_lag(i: int) -> float:
    """The slow partition's lag (s of event time) at event ``i``: always LAG_S."""
    return float(LAG_S)


def varying_lag(i: int, period: int = 1_200) -> float:
    """A triangle wave 0 -> LAG_S -> 0 over ``period`` events (slope 0.5: offsets stay ordered)."""
    phase = (i % period) / period
    return LAG_S * (2 * phase if phase < 0.5 else 2 * (1 - phase))


def _input(n: int, lag: Callable[[int], float] = fixed_lag) -> list[Item]:
    """Items in write order: :func:`~benchmarks.tracker_pure.events` with the slow partition's
    written ``lag(i)`` s late, then a final close marker per partition."""
    items: list[tuple[float, int | None, Record, int | None]] = []
    for i, p, t_ms, through in events(n):
        pos = float(i + (lag(i) * 10 if p == SLOW else 0))
        if t_ms is not None:
            rec = (f"u{i % 50}".encode(), event(f"u{i % 50}", 1.0, t_ms), p)
            items.append((pos, EPOCH_MS + t_ms // WINDOW_MS * WINDOW_MS, rec, None))
        else:
            items.append((pos + 0.5, None, (None, marker(through), p), through))
    items.sort(key=lambda x: x[0])
    end_ms = n * 100 + 60_000
    tail: list[Item] = [(None, (None, marker(end_ms), p), end_ms) for p in range(PARTITIONS)]
    return [(w, r, c) for _, w, r, c in items] + tail


def _topic(ctx: BenchContext, prefix: str, n: int = 0) -> str:
    """A new topic of PARTITIONS partitions, holding ``_input(n)`` if ``n``."""
    topic = f"bench-{prefix}-{uuid.uuid4().hex[:6]}"
    create_topic(ctx.bootstrap, topic, PARTITIONS)
    if n:
        produce(ctx.bootstrap, topic, [r for _, r, _ in _input(n)])
    return topic


def _events(ctx: BenchContext, topic: str, per_trigger: int | None) -> DataFrame:
    return parse(read_stream(ctx.spark, ctx.bootstrap, topic, max_offsets_per_trigger=per_trigger))


def _watermark_windows(events: DataFrame, delay: str) -> DataFrame:
    return (
        events.where("event_time is not null")
        .withWatermark("event_time", delay)
        .groupBy(F.window("event_time", "10 seconds"), "user_id")
        .count()
        .select(F.unix_millis("window.start").alias("window_start_ms"), "user_id", "count")
    )


def _tracked(
    ctx: BenchContext,
    topic: str,
    per_trigger: int | None,
    folder: Any,
    sink: Callable[[DataFrame, int], None],
    path: str = "distributed",
) -> tuple[Any, LocalTrackingAgent]:
    """The tracked window count on ``path``, closed by the producers' markers (partitions not
    ordered); the late rows are only counted (the handler's ``late_rows`` metric)."""
    # Never compacted (the thresholds are out of reach), so every log record stays for the
    # report count of _written_up_front; a compaction would delete the records it covers.
    agent = LocalTrackingAgent(folder / "agent", snapshot_every=1 << 62, snapshot_bytes=1 << 62)
    q = (
        TrackedStream(
            _events(ctx, topic, per_trigger),
            key="user_id",
            event_time="event_time",
            agent=agent,
            closing=Closing.partitions(topic, PARTITIONS, ordered=False),
            close_marker="close_through",
        )
        .apply(Tumbling("10 seconds", namespace="bench"), WindowAggregate(Count()))
        .start(
            sink,
            checkpoint=str(folder / "chk"),
            late=lambda df, batch_id: None,
            trigger=Trigger(processing_time="0 seconds"),
            path=path,
        )
    )
    return q, agent


def _drain_tracked(q: Any, agent: LocalTrackingAgent, emitted: Callable[[], bool]) -> float:
    """Seconds until every window is emitted (no substream left open)."""
    began = time.perf_counter()
    while agent.state().open_substreams() or not emitted():
        q.processAllAvailable()
    q.processAllAvailable()
    return time.perf_counter() - began


def _tracked_count(
    ctx: BenchContext, topic: str, per_trigger: int | None, folder: Any, path: str = "distributed"
) -> tuple[Any, LocalTrackingAgent, int, float]:
    """The tracked window count on ``path`` over all of ``topic``, stopped once every window is
    emitted: the query, its agent, the rows counted and the seconds it took."""
    counts: list[int] = []
    sink = lambda df, _b: counts.append(df.agg(F.sum("count")).first()[0] or 0)  # noqa: E731
    q, agent = _tracked(ctx, topic, per_trigger, folder, sink, path)
    seconds = _drain_tracked(q, agent, lambda: bool(counts))
    q.stop()
    return q, agent, sum(counts), seconds


# -- (b), (c), (d): all input written up front, every query drains the same topic ------------
def _untracked(events: DataFrame) -> DataFrame:
    """Plain ``applyInPandasWithState``: count per (window, user), emitted on event-time timeout."""

    def counts(key: Any, frames: Iterator[pd.DataFrame], state: Any) -> Iterator[pd.DataFrame]:
        # Nested so that it is pickled by value: ``benchmarks`` is not importable on workers.
        if state.hasTimedOut:
            (count,) = state.get
            state.remove()
            yield pd.DataFrame({"window_start_ms": [key[0]], "user_id": [key[1]], "count": [count]})
            return
        n = sum(len(f) for f in frames)
        state.update(((state.get[0] if state.exists else 0) + n,))
        state.setTimeoutTimestamp(int(key[0]) + WINDOW_MS)

    start_ms = F.unix_millis("event_time") - F.unix_millis("event_time") % WINDOW_MS
    return (
        events.where("event_time is not null")
        .withWatermark("event_time", DROP_DELAY)
        # the watermark column stays in the plan (event-time timeouts)
        .select(start_ms.alias("window_start_ms"), "user_id", "event_time")
        .groupBy("window_start_ms", "user_id")
        .applyInPandasWithState(
            counts,
            "window_start_ms long, user_id string, count long",
            "count long",
            "append",
            GroupStateTimeout.EventTimeTimeout,
        )
    )


def _written_up_front(ctx: BenchContext, n: int, per_trigger: int) -> list[Figure]:
    """Rows dropped, wall time and rows/s of Spark's watermark windows (JVM), the untracked
    count and the tracker on both paths; the tracker's report messages against punctuations."""
    topic = _topic(ctx, "trk", n)
    wm = _watermark_windows(_events(ctx, topic, per_trigger), DROP_DELAY)
    q = start_query(wm, ctx.folder("tracker_wm"), "memory", live=True)
    wm_s = drained(q)
    emitted = ctx.spark.table(q.name).agg(F.sum("count")).first()[0] or 0
    untracked = _untracked(_events(ctx, topic, per_trigger))
    un_s = drained(start_query(untracked, ctx.folder("tracker_untracked"), "memory", live=True))
    folder = ctx.folder("tracker_tr")
    _, agent, counted, tr_s = _tracked_count(ctx, topic, per_trigger, folder)
    _, _, dr_counted, dr_s = _tracked_count(
        ctx, topic, per_trigger, ctx.folder("tracker_driver"), "driver"
    )
    if dr_counted != n:
        raise AssertionError(f"driver path: {dr_counted} of {n} rows counted")
    reports = 0
    for gen in log_generations(folder / "agent"):
        for line in (folder / "agent" / log_name(gen)).read_text().splitlines():
            reports += len(json.loads(line).get("reports", []))
    k = len(agent.end_events(0, 10**9))
    figure = partial(Figure, "tracker")
    rate = partial(Figure, "tracker", metric="throughput", unit="rows/s")
    return [
        figure("spark watermark", "rows dropped", n - emitted, "rows", True,
               f"delay {DROP_DELAY}; includes windows never closed"),
        figure("tracker", "rows dropped", n - counted, "rows"),
        figure("spark watermark", "wall time", wm_s, "s", baseline=True),
        figure("tracker", "wall time", tr_s, "s", note="incl. flush batches"),
        figure("tracker", "report messages", reports, "msgs", note=f"K={k}, P={PARTITIONS}"),
        figure("punctuations K*P^2", "report messages", k * PARTITIONS**2, "msgs", True),
        rate("untracked applyInPandasWithState", value=n / un_s, baseline=True,
             note=f"{per_trigger} rows/trigger, watermark timeouts"),
        rate("tracker", value=n / tr_s, note="distributed path, until all emitted"),
        rate("tracker driver path", value=n / dr_s, note="until all emitted"),
        rate("spark window count (JVM)", value=n / wm_s,
             note="reference: groupBy(window).count() with the same watermark"),
    ]  # fmt: skip


# -- (a): latency from a window's closing record in Kafka to its result at the sink ---------
def _produce_live(bootstrap: str, topic: str, items: list[Item]) -> dict[int, float]:
    """Write ``items`` in chunks of 20 every 0.2 s; window start -> when its closing record was
    in Kafka (its last data row, and of every partition the first close marker past its end)."""
    from spark_ext import kafka_clients

    last_written: dict[int, float] = {}
    markers: list[tuple[int, int, float]] = []  # (partition, through abs ms, time)
    producer = kafka_clients.producer(bootstrap, acks="all", linger_ms=5)
    try:
        for i in range(0, len(items), 20):
            part = items[i : i + 20]
            for _, (k, v, p), _ in part:
                producer.send(topic, key=k, value=v, partition=p)
            producer.flush()
            now = time.time()
            for w, (_, _, p), through in part:
                if w is not None:
                    last_written[w] = now
                if through is not None:
                    markers.append((p, EPOCH_MS + through, now))
            time.sleep(0.2)
    finally:
        producer.close()
    closed = {}
    for w, last in last_written.items():  # markers are in write order: the first is the earliest
        end = w + WINDOW_MS
        firsts = [
            next((t for q, th, t in markers if q == p and th >= end), None)
            for p in range(PARTITIONS)
        ]
        if None not in firsts:
            closed[w] = max([last, *firsts])
    return closed


def _arrivals(into: dict[int, float]) -> Callable[[DataFrame, int], None]:
    def sink(df: DataFrame, _batch: int) -> None:
        now = time.time()
        for row in df.select("window_start_ms").distinct().collect():
            into.setdefault(int(row[0]), now)

    return sink


def _latency(
    ctx: BenchContext, n: int, lag: Callable[[int], float], metric: str, tuning: str
) -> list[Figure]:
    """Release latency of the tracker and of Spark's watermark windows, same input, same run
    (delay: LATENCY_DELAY).
    """
    topic = _topic(ctx, "trk-live")
    items = _input(n, lag)
    wm_seen: dict[int, float] = {}
    tr_seen: dict[int, float] = {}
    wm_windows = _watermark_windows(_events(ctx, topic, None), LATENCY_DELAY)
    wm = start_query(wm_windows, ctx.folder("tracker_lat_wm"), _arrivals(wm_seen), live=True)
    tr, agent = _tracked(ctx, topic, None, ctx.folder("tracker_lat_tr"), _arrivals(tr_seen))
    closed = _produce_live(ctx.bootstrap, topic, items)
    _drain_tracked(tr, agent, lambda: bool(tr_seen))
    wm.processAllAvailable()
    wm.stop()
    tr.stop()
    # windows the watermark could close: every one whose end is DELAY before the last event
    last_event_ms = EPOCH_MS + (n - 1) * 100
    delay_ms = int(LATENCY_DELAY.split()[0]) * 1000
    closable = [w for w in closed if w + WINDOW_MS + delay_ms <= last_event_ms]
    figures = []
    for variant, seen, base in (("spark watermark", wm_seen, True), ("tracker", tr_seen, False)):
        lat = [seen[w] - closed[w] for w in closable if w in seen]
        if not lat:
            continue
        note = f"{len(lat)}/{len(closable)} windows" + (
            f", delay {LATENCY_DELAY} ({tuning})" if base else ", same batch as its closing row"
        )
        figures += [
            Figure("tracker", variant, f"{metric} median", percentile(lat, 0.5), "s", base, note),
            Figure("tracker", variant, f"{metric} p95", percentile(lat, 0.95), "s", base),
        ]
    return figures


def run(ctx: BenchContext) -> list[Figure]:
    if os.environ.get("SPARK_EXT_BENCH_TRACKER") == "throughput":  # (b)-(d) only, at 1M events
        n = ctx.n(1_000_000)
        return _written_up_front(ctx, n, max(1_000, min(100_000, n // 10)))
    n = ctx.n(20_000)
    figures = _written_up_front(ctx, n, max(500, n // 20))
    figures += _latency(ctx, n, fixed_lag, "latency fixed lag", f"the exact lag {LAG_S} s + 1 s")
    figures += _latency(
        ctx, n, varying_lag, f"latency lag 0-{LAG_S} s", f"drops nothing at lag {LAG_S} s"
    )
    return figures
