"""Tracker scale (c): 10,000 open windows x 64 partitions, driver time, agent bytes, restarts.

Synthetic batches shaped like a tracked query's (a gate report per source partition, one per
operator shard) feed a ``LocalTrackingAgent``, then a ``KafkaTrackingAgent`` (at most
KAFKA_BATCHES); partition 0 lags OPEN windows behind, each batch ends STEP windows and opens
STEP. No baseline: the targets are in the notes. Run: ``scripts/bench.sh tracker_scale --repeat
1`` (``--scale 0.1``: 1,000 past batches at most).
"""

from __future__ import annotations

import logging
import statistics
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from benchmarks.common import BenchContext, Figure, folder_bytes, percentile
from spark_ext.tracker.agent import LocalTrackingAgent
from spark_ext.tracker.kafka_agent import KafkaTrackingAgent
from spark_ext.tracker.reports import Report, ReportKey, TaskReport

log = logging.getLogger(__name__)

OPEN = 10_000  # open windows
PARTITIONS = 64
SHARDS = 8  # operator shards
STEP = 10  # windows ended (and opened) per batch
WINDOW_MS = 1_000
RESTARTS = (100, 1_000, 10_000)  # past batches before each restart measurement
TARGET_MS = 100.0
#: The Kafka agent runs at most this many batches (a transaction each: slower to drive).
KAFKA_BATCHES = 1_000
NS = "w"


def _sid(w: int) -> str:
    return f"{NS}/{w * WINDOW_MS}/{(w + 1) * WINDOW_MS}"


def batch(b: int) -> list[Report]:
    """Reports of batch ``b``: partitions 1.. write into the newest STEP windows, partition 0
    into the STEP windows at its own (lagging) frontier; shards finish every row."""
    head = OPEN + b * STEP  # partition 1..'s newest window index after this batch
    finished: list[dict[str, int]] = [{} for _ in range(SHARDS)]
    done: list[dict[str, int]] = [{} for _ in range(SHARDS)]  # -1 per row a shard finished
    out = []
    for p in range(PARTITIONS):
        first = head - STEP if p else b * STEP
        body = TaskReport("assign", p)
        for w in range(first, first + STEP):
            sid, label = _sid(w), (b * 1_000_003 + p * 7_919 + w) & 0xFFFFFFFF
            body.xors[sid] = label
            body.counts[sid] = 1
            body.ends[sid] = (w + 1) * WINDOW_MS
            shard = finished[w % SHARDS]
            shard[sid] = shard.get(sid, 0) ^ label
            done[w % SHARDS][sid] = done[w % SHARDS].get(sid, 0) - 1
        body.progress[f"t:{p}"] = (first + STEP) * WINDOW_MS
        out.append(Report(ReportKey("q", b, "assign", p), body))
    for s, (xors, counts) in enumerate(zip(finished, done, strict=True)):
        out.append(
            Report(ReportKey("q", b, "operator", s), TaskReport("operator", s, xors, counts))
        )
    return out


def _written() -> int:
    with open("/proc/self/io") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("wchar:"))


def _warm_up(agent: Any) -> None:
    """Open OPEN windows: every partition but 0 jumps to the head (a ``warm`` stage report)."""
    reports = []
    for p in range(1, PARTITIONS):
        body = TaskReport("assign", p, progress={f"t:{p}": OPEN * WINDOW_MS})
        for w in range(p - 1, OPEN, PARTITIONS - 1):
            body.ends[_sid(w)] = (w + 1) * WINDOW_MS
            body.xors[_sid(w)] = 0
        reports.append(Report(ReportKey("q", 0, "warm", p), body))
    agent.apply(reports)


@dataclass
class Series:
    """What one agent's drive measured."""

    apply_ms: list[float] = field(default_factory=list)
    written: list[int] = field(default_factory=list)
    restarts: list[tuple[int, float, int]] = field(default_factory=list)  # batches, ms, records
    ended: int = 0


def drive(open_agent: Callable[[], Any], marks: Sequence[int]) -> Series:
    """Warm up, then ``marks[-1]`` batches; reopen the agent after each mark."""
    out = Series()
    agent = open_agent()
    agent.declare(NS, [f"t:{p}" for p in range(PARTITIONS)])
    _warm_up(agent)
    for b in range(marks[-1]):
        reports = batch(b)
        w0, t0 = _written(), time.perf_counter()
        out.ended += len(agent.apply(reports))
        out.apply_ms.append((time.perf_counter() - t0) * 1000)
        out.written.append(_written() - w0)
        if b + 1 in marks:
            open_now = agent.figures().open_substreams
            assert open_now >= OPEN - STEP, f"{open_now} open windows, not {OPEN}"
            if hasattr(agent, "close"):
                agent.close()
            t0 = time.perf_counter()
            agent = open_agent()
            ms = (time.perf_counter() - t0) * 1000
            out.restarts.append((b + 1, ms, agent.load_figures["records"]))
            log.warning("restart after %d batches: %.1f ms (%s)", b + 1, ms, agent.load_figures)
    if hasattr(agent, "close"):
        agent.close()
    return out


def figures_of(variant: str, s: Series, bytes_note: str | None) -> list[Figure]:
    figure = partial(Figure, "tracker_scale", variant)
    target = f"target <= {TARGET_MS:.0f} ms"
    setup = f"{OPEN} open windows x {PARTITIONS} partitions, {SHARDS} shards, {STEP} ends/batch"
    median, p95 = percentile(s.apply_ms, 0.5), percentile(s.apply_ms, 0.95)
    out = [
        figure("driver time/batch median", median, "ms", note=f"{target}; {setup}"),
        figure("driver time/batch p95", p95, "ms", note=target),
    ]
    if bytes_note is not None:
        out += [
            figure("bytes written/batch median", statistics.median(s.written), "B",
                   note="log record + end events"),
            figure("bytes written/batch mean", statistics.fmean(s.written), "B", note=bytes_note),
        ]  # fmt: skip
    return out + [
        figure(f"restart after {n} batches", ms, "ms",
               note=f"flat target; snapshot + {records} log records replayed")
        for n, ms, records in s.restarts
    ]  # fmt: skip


def run(ctx: BenchContext) -> list[Figure]:
    folder = ctx.folder("tracker_scale")
    marks = [n for n in RESTARTS if n <= max(100, int(RESTARTS[-1] * ctx.scale))]
    local = drive(lambda: LocalTrackingAgent(folder / "agent"), marks)
    ends = folder_bytes(folder / "agent" / "ends")
    note = f"after {marks[-1]} batches; end-event files {ends} B ({local.ended} events)"
    figures = figures_of("local agent", local, "incl. snapshots amortised")
    figures.append(Figure("tracker_scale", "local agent", "folder size at end",
                          folder_bytes(folder / "agent"), "B", note=note))  # fmt: skip
    name = f"scale-{uuid.uuid4().hex[:8]}"
    kafka_marks = [n for n in marks if n <= KAFKA_BATCHES]
    kafka = drive(lambda: KafkaTrackingAgent(ctx.bootstrap, name), kafka_marks)
    figures += figures_of("kafka agent", kafka, None)
    return figures
