"""Tracker vs Spark watermark windows: rows dropped, latency, report traffic, tracked vs untracked rows/s.

(a) release latency from a window's closing record in Kafka to its row at the sink, both
queries on one live topic, the slow partition's lag fixed at LAG_S or varying 0..LAG_S (the
watermark's delay: the smallest that drops nothing). Run: ``scripts/bench.sh tracker
[--scale 0.25] [--repeat 1]``; compare ratios, not absolute seconds.
"""

from __future__ import annotations

import json
import statistics
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pandas as pd
from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.streaming.state import GroupStateTimeout

from benchmarks.common import BenchContext, Figure
from connectors.kafka import create_topic, produce, read_stream
from jobs.tracker_windows import EPOCH, event, marker, parse
from spark_ext.operators import Count, WindowAggregate
from spark_ext.sinks.trigger import Trigger
from spark_ext.streaming import Closing, TrackedStream
from spark_ext.tracker import LocalTrackingAgent, Tumbling
from spark_ext.tracker.snapshot import log_generations, log_name

PARTITIONS = 4
SLOW = PARTITIONS - 1  # the slow partition lags LAG_S seconds of event time behind the others
LAG_S = 30
DISORDER_MS = 300  # in-partition disorder: every 7th event is 300 ms late in its partition
DROP_DELAY = "20 seconds"  # (b): larger than the in-partition disorder, smaller than the lag
#: (a): the smallest whole-second delay under which the watermark drops < 1 % of rows
#: (the slow partition's rows arrive up to LAG_S + disorder behind the fast partitions).
LATENCY_DELAY = f"{LAG_S + 1} seconds"
MARKER_EVERY_MS = 2_000  # each producer closes its partition through (its time - disorder)
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
    """Items in write order: n events, 10 per second of event time, slightly out of order; the slow
    partition's written ``lag(i)`` s late; each producer writes a close marker every
    MARKER_EVERY_MS of its event time and a final one.
    """
    items: list[tuple[float, int | None, Record, int | None]] = []
    last_marker = [0] * PARTITIONS
    for i in range(n):
        p = i % PARTITIONS
        t_ms = i * 100 + (DISORDER_MS if i % 7 == 0 else 0)
        pos = float(i + (lag(i) * 10 if p == SLOW else 0))
        rec = (f"u{i % 50}".encode(), event(f"u{i % 50}", 1.0, t_ms), p)
        items.append((pos, EPOCH_MS + t_ms // WINDOW_MS * WINDOW_MS, rec, None))
        if i * 100 - last_marker[p] >= MARKER_EVERY_MS:
            last_marker[p] = i * 100
            through = i * 100 - DISORDER_MS
            items.append((pos + 0.5, None, (None, marker(through), p), through))
    items.sort(key=lambda x: x[0])
    end_ms = n * 100 + 60_000
    tail: list[Item] = [(None, (None, marker(end_ms), p), end_ms) for p in range(PARTITIONS)]
    return [(w, r, c) for _, w, r, c in items] + tail


def _topic(ctx: BenchContext, prefix: str) -> str:
    topic = f"bench-{prefix}-{uuid.uuid4().hex[:6]}"
    create_topic(ctx.bootstrap, topic, PARTITIONS)
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
    late_sink: Callable[[DataFrame, int], None] = lambda df, batch_id: None,
) -> tuple[Any, LocalTrackingAgent]:
    """The tracked window count, closed by the producers' markers (partitions not ordered).

    ``late_sink`` receives the rows that broke their partition's markers (default: the
    benchmark only counts them through the handler's ``late_rows`` metric).
    """
    # Never compacted (the thresholds are out of reach), so every log record stays for the
    # report count of _drops_and_reports; a compaction would delete the records it covers.
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
            late=late_sink,
            trigger=Trigger(processing_time="0 seconds"),
        )
    )
    return q, agent


def _drain_tracked(q: Any, agent: LocalTrackingAgent, emitted: Callable[[], bool]) -> None:
    while agent.state().open_substreams() or not emitted():
        q.processAllAvailable()
    q.processAllAvailable()


# -- (b), (c): all input written up front -------------------------------------------------
def _drops_and_reports(ctx: BenchContext, n: int, per_trigger: int) -> list[Figure]:
    spark = ctx.spark
    topic = _topic(ctx, "trk")
    produce(ctx.bootstrap, topic, [r for _, r, _ in _input(n)])

    folder = ctx.folder("tracker_wm")
    wm = (
        _watermark_windows(_events(ctx, topic, per_trigger), DROP_DELAY)
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

    folder = ctx.folder("tracker_tr")
    out: list[int] = []
    q, agent = _tracked(
        ctx,
        topic,
        per_trigger,
        folder,
        lambda df, _b: out.append(df.agg(F.sum("count")).first()[0] or 0),
    )
    t0 = time.monotonic()
    _drain_tracked(q, agent, lambda: bool(out))
    tr_s = time.monotonic() - t0
    q.stop()
    reports = 0
    for gen in log_generations(folder / "agent"):
        for line in (folder / "agent" / log_name(gen)).read_text().splitlines():
            reports += len(json.loads(line).get("reports", []))
    k = len(agent.end_events(0, 10**9))
    return [
        Figure(
            "tracker",
            "spark watermark",
            "rows dropped",
            n - emitted,
            "rows",
            baseline=True,
            note=f"delay {DROP_DELAY}; includes windows never closed",
        ),
        Figure("tracker", "tracker", "rows dropped", n - sum(out), "rows"),
        Figure("tracker", "spark watermark", "wall time", wm_s, "s", baseline=True),
        Figure("tracker", "tracker", "wall time", tr_s, "s", note="incl. flush batches"),
        Figure(
            "tracker", "tracker", "report messages", reports, "msgs", note=f"K={k}, P={PARTITIONS}"
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


# -- (a): latency from a window's closing record in Kafka to its result at the sink ---------
class _LiveProducer(threading.Thread):
    """Writes the input in chunks at a steady pace; notes when each record went out.

    ``last_written[w]``: the last data row of window ``w``; ``closed[w]``: when the last
    partition's first close marker at or past ``w``'s end was in Kafka.
    """

    def __init__(self, bootstrap: str, topic: str, items: list[Item]):
        super().__init__(daemon=True)
        self.bootstrap, self.topic, self.items = bootstrap, topic, items
        self.last_written: dict[int, float] = {}
        self.markers: list[tuple[int, int, float]] = []  # (partition, through abs ms, time)
        self.chunk, self.pause_s = 20, 0.2

    def run(self) -> None:
        from spark_ext import kafka_clients

        producer = kafka_clients.producer(self.bootstrap, acks="all", linger_ms=5)
        try:
            for i in range(0, len(self.items), self.chunk):
                part = self.items[i : i + self.chunk]
                for _, (k, v, p), _ in part:
                    producer.send(self.topic, key=k, value=v, partition=p)
                producer.flush()
                now = time.time()
                for w, (_, _, p), through in part:
                    if w is not None:
                        self.last_written[w] = now
                    if through is not None:
                        self.markers.append((p, EPOCH_MS + through, now))
                time.sleep(self.pause_s)
        finally:
            producer.close()

    def closed(self) -> dict[int, float]:
        """Window start -> when its closing record (last partition's marker) was in Kafka."""
        out: dict[int, float] = {}
        for w, last in self.last_written.items():
            end = w + WINDOW_MS
            firsts = []
            for p in range(PARTITIONS):
                times = [t for q, through, t in self.markers if q == p and through >= end]
                if not times:
                    break
                firsts.append(min(times))
            else:
                out[w] = max([last, *firsts])
        return out


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
    folder = ctx.folder("tracker_lat_wm")
    wm = (
        _watermark_windows(_events(ctx, topic, None), LATENCY_DELAY)
        .writeStream.foreachBatch(_arrivals(wm_seen))
        .option("checkpointLocation", str(folder / "chk"))
        .trigger(processingTime="0 seconds")
        .start()
    )
    tr, agent = _tracked(ctx, topic, None, ctx.folder("tracker_lat_tr"), _arrivals(tr_seen))
    producer = _LiveProducer(ctx.bootstrap, topic, items)
    producer.start()
    producer.join()
    _drain_tracked(tr, agent, lambda: bool(tr_seen))
    wm.processAllAvailable()
    wm.stop()
    tr.stop()
    # windows the watermark could close: every one whose end is DELAY before the last event
    last_event_ms = EPOCH_MS + (n - 1) * 100
    delay_ms = int(LATENCY_DELAY.split()[0]) * 1000
    closed = producer.closed()
    closable = [w for w in closed if w + WINDOW_MS + delay_ms <= last_event_ms]
    figures = []
    for variant, seen, base in (("spark watermark", wm_seen, True), ("tracker", tr_seen, False)):
        lat = sorted(seen[w] - closed[w] for w in closable if w in seen)
        if not lat:
            continue
        note = f"{len(lat)}/{len(closable)} windows" + (
            f", delay {LATENCY_DELAY} ({tuning})" if base else ", same batch as its closing row"
        )
        figures += [
            Figure("tracker", variant, f"{metric} median", statistics.median(lat), "s", base, note),
            Figure("tracker", variant, f"{metric} p95", lat[int(0.95 * (len(lat) - 1))], "s", base),
        ]
    return figures


# -- (d): rows/s of the tracked query vs the same query untracked --------------------------
def _drain_to_memory(df: DataFrame, name: str, folder: Any) -> float:
    """Seconds a query of ``df`` into Spark's memory sink takes to process all its input."""
    q = (
        df.writeStream.format("memory")
        .queryName(f"{name}_{uuid.uuid4().hex[:6]}")
        .option("checkpointLocation", str(folder / "chk"))
        .trigger(processingTime="0 seconds")
        .start()
    )
    t0 = time.monotonic()
    q.processAllAvailable()
    seconds = time.monotonic() - t0
    q.stop()
    return seconds


def _throughput(ctx: BenchContext, n: int, per_trigger: int) -> list[Figure]:
    topic = _topic(ctx, "trk-tp")
    produce(ctx.bootstrap, topic, [r for _, r, _ in _input(n)])
    folder = ctx.folder("tracker_untracked")

    def untracked_counts(
        key: Any, frames: Iterator[pd.DataFrame], state: Any
    ) -> Iterator[pd.DataFrame]:
        """Plain applyInPandasWithState: count per (window, user), emitted on event-time timeout.

        (Nested so that it is pickled by value: ``benchmarks`` is not importable on workers.)
        """
        if state.hasTimedOut:
            (count,) = state.get
            state.remove()
            yield pd.DataFrame({"window_start_ms": [key[0]], "user_id": [key[1]], "count": [count]})
            return
        n = sum(len(f) for f in frames)
        state.update(((state.get[0] if state.exists else 0) + n,))
        state.setTimeoutTimestamp(int(key[0]) + WINDOW_MS)

    untracked = (
        _events(ctx, topic, per_trigger)
        .where("event_time is not null")
        .withWatermark("event_time", DROP_DELAY)
        .select(
            (F.unix_millis("event_time") - F.unix_millis("event_time") % WINDOW_MS).alias(
                "window_start_ms"
            ),
            "user_id",
            "event_time",  # the watermark column stays in the plan (event-time timeouts)
        )
        .groupBy("window_start_ms", "user_id")
        .applyInPandasWithState(
            untracked_counts,
            "window_start_ms long, user_id string, count long",
            "count long",
            "append",
            GroupStateTimeout.EventTimeTimeout,
        )
    )
    un_s = _drain_to_memory(untracked, "bench_untracked", folder)
    # Spark's own windowed count (JVM aggregation, no Python): a reference, not the baseline
    jvm = _watermark_windows(_events(ctx, topic, per_trigger), DROP_DELAY)
    jvm_s = _drain_to_memory(jvm, "bench_jvm", ctx.folder("tracker_jvm"))

    out: list[int] = []
    q, agent = _tracked(
        ctx,
        topic,
        per_trigger,
        ctx.folder("tracker_tracked"),
        lambda df, _b: out.append(df.agg(F.sum("count")).first()[0] or 0),
    )
    t0 = time.monotonic()
    _drain_tracked(q, agent, lambda: bool(out))
    tr_s = time.monotonic() - t0
    q.stop()
    return [
        Figure(
            "tracker",
            "untracked applyInPandasWithState",
            "throughput",
            n / un_s,
            "rows/s",
            baseline=True,
            note=f"{per_trigger} rows/trigger, watermark timeouts",
        ),
        Figure("tracker", "tracker", "throughput", n / tr_s, "rows/s", note="until all emitted"),
        Figure(
            "tracker",
            "spark window count (JVM)",
            "throughput",
            n / jvm_s,
            "rows/s",
            note="reference: groupBy(window).count() with the same watermark",
        ),
    ]


def run(ctx: BenchContext) -> list[Figure]:
    n = ctx.n(20_000)
    per_trigger = max(500, n // 20)
    figures = _drops_and_reports(ctx, n, per_trigger)
    figures += _latency(ctx, n, fixed_lag, "latency fixed lag", f"the exact lag {LAG_S} s + 1 s")
    figures += _latency(
        ctx, n, varying_lag, f"latency lag 0-{LAG_S} s", f"drops nothing at lag {LAG_S} s"
    )
    figures += _throughput(ctx, n, per_trigger)
    return figures
