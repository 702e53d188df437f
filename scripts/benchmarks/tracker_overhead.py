"""Tracker overhead (d): tracked vs untracked windowed counts, rows/s at 1M events.

The same input as ``tracker`` (4 partitions, in-partition disorder, a slow partition, close
markers), written up front; both queries drain it in micro-batches of PER_TRIGGER rows. The
baseline is Spark's ``applyInPandasWithState`` counting per (window, user) and emitting on an
event-time timeout (untracked: a watermark, late rows dropped); the tracked query counts the
same windows with :class:`~spark_ext.streaming.TrackedStream` (gate and shard stages, late rows
kept, reports to a local agent). Target: tracked >= 0.85x.

Run: ``scripts/bench.sh tracker_overhead [--scale 1] [--repeat 1]``.
"""

from __future__ import annotations

from benchmarks.common import BenchContext, Figure
from benchmarks.tracker import _throughput

PER_TRIGGER = 100_000


def run(ctx: BenchContext) -> list[Figure]:
    n = ctx.n(1_000_000)
    return _throughput(ctx, n, max(1_000, min(PER_TRIGGER, n // 10)))
