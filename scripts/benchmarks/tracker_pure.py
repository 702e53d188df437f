"""Tracker pure code: events/s of the gate, shards and agent (``PipelineTester``) on one core.

The tracker's code without Spark, as the driver path and the operator stage run it: batches of
PER_BATCH rows of 4 partitions, 50 keys, 10 events per second of event time, every 7th event
300 ms late in its partition, a close marker per partition every 2 s of event time; 10 s
tumbling windows counted per key (``WindowAggregate(Count())``). Output checked: every event
counted once, none late. Run: ``scripts/bench.sh tracker_pure [--scale 1] [--repeat 3]``.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

from benchmarks.common import BenchContext, Figure
from spark_ext.operators import Count, WindowAggregate
from spark_ext.streaming import Closing
from spark_ext.streaming.tester import PipelineTester
from spark_ext.tracker import Tumbling

PARTITIONS = 4
PER_BATCH = 10_000
DISORDER_MS = 300
MARKER_EVERY_MS = 2_000


def events(n: int) -> Iterator[tuple[int, int, int | None, int | None]]:
    """``(i, partition, event ms, None)`` for ``n`` events, each followed, every MARKER_EVERY_MS
    of event time, by its partition's close marker ``(i, partition, None, through ms)``."""
    last = [0] * PARTITIONS
    for i in range(n):
        p = i % PARTITIONS
        yield i, p, i * 100 + (DISORDER_MS if i % 7 == 0 else 0), None
        if i * 100 - last[p] >= MARKER_EVERY_MS:
            last[p] = i * 100
            yield i, p, None, i * 100 - DISORDER_MS


def rows(n: int) -> list[dict[str, Any]]:
    """``n`` events and their partitions' close markers, in offset order per partition."""
    out: list[dict[str, Any]] = []
    offsets = [0] * PARTITIONS
    tail = [(0, p, None, n * 100 + 60_000) for p in range(PARTITIONS)]
    for i, p, t, through in [*events(n), *tail]:
        row = {"key": f"u{i % 50}", "event_time_ms": t} if through is None else {"close": through}
        out.append({"partition": p, "offset": offsets[p], **row})
        offsets[p] += 1
    return out


def events_per_s(n: int, per_batch: int = PER_BATCH) -> float:
    """Run ``n`` events through a fresh :class:`PipelineTester`; events/s, output checked."""
    data = rows(n)
    t = PipelineTester(
        WindowAggregate(Count()),
        Tumbling("10 seconds", namespace="w"),
        Closing.partitions("src", PARTITIONS, ordered=False),
    )
    counted = late = 0
    began = time.perf_counter()
    for i in range(0, len(data), per_batch):
        res, lat = t.run_batch(data[i : i + per_batch])
        counted += int(res["count"].sum()) if len(res) else 0
        late += len(lat)
    elapsed = time.perf_counter() - began
    if counted != n or late:
        raise AssertionError(f"{counted} of {n} counted, {late} late")
    return n / elapsed


def run(ctx: BenchContext) -> list[Figure]:
    n = ctx.n(100_000)
    value = events_per_s(n)
    note = f"{n:,} events, {PER_BATCH:,} rows a batch, one core"
    return [Figure("tracker_pure", "PipelineTester", "events/s", value, "ev/s", note=note)]


if __name__ == "__main__":
    import sys

    print(f"{events_per_s(int(sys.argv[1]) if len(sys.argv) > 1 else 100_000):,.0f} events/s")
