"""Tracker overhead (d): tracked vs untracked windowed counts, rows/s at 1M events.

``tracker``'s input written up front, drained in batches of PER_TRIGGER rows. Baseline:
``applyInPandasWithState`` counting per (window, user), emitting on an event-time timeout
(late rows dropped); the tracked query counts the same windows with
:class:`~spark_ext.streaming.TrackedStream` (late rows kept). Target: tracked >= 0.85x.

Run: ``scripts/bench.sh tracker_overhead [--scale 1] [--repeat 1]``.
"""

from __future__ import annotations

from benchmarks.common import BenchContext, Figure
from benchmarks.tracker import _throughput

PER_TRIGGER = 100_000


def run(ctx: BenchContext) -> list[Figure]:
    n = ctx.n(1_000_000)
    return _throughput(ctx, n, max(1_000, min(PER_TRIGGER, n // 10)))
