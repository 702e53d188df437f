"""Tracker latency floor: micro-batch time of Spark's watermark windows, of an empty Python stateful stage, and of the tracker.

Each query alone on ``tracker``'s input (PER_TRIGGER rows a batch, the first two batches not
counted): Spark's watermark windows, a ``transformWithStateInPandas`` stage that only counts
per key (keyed like the gate: one key per source partition, 4), and the tracked query on each
path. Why and the figures: README, "Latency, measured".

Run: ``scripts/bench.sh tracker_floor [--repeat 3]``.
"""

from __future__ import annotations

from collections.abc import Iterator
from functools import partial
from typing import Any

import pandas as pd
from pyspark.sql import functions as F
from pyspark.sql.streaming.stateful_processor import StatefulProcessor
from pyspark.sql.types import LongType, StructField, StructType

from benchmarks.common import BenchContext, Figure, batch_ms, drained, percentile, start_query
from benchmarks.tracker import LATENCY_DELAY, _events, _topic, _tracked_count, _watermark_windows

PER_TRIGGER = 200  # rows per micro-batch: the live rate of the latency benchmark


def _count_per_key() -> StatefulProcessor:
    """A fresh processor (defined here so that it is pickled by value: ``benchmarks`` is not
    importable on workers)."""

    class _CountPerKey(StatefulProcessor):
        """The least a Python stateful operator does: one ValueState update per key and batch."""

        def init(self, handle: Any) -> None:
            self.count = handle.getValueState("n", StructType([StructField("n", LongType())]))

        def handleInputRows(
            self, key: Any, rows: Iterator[pd.DataFrame], timerValues: Any
        ) -> Iterator[pd.DataFrame]:
            n = sum(len(r) for r in rows)
            before = self.count.get()
            self.count.update(((before[0] if before is not None else 0) + n,))
            yield pd.DataFrame({"source": [str(key[0])], "n": [n]})

    return _CountPerKey()


def run(ctx: BenchContext) -> list[Figure]:
    topic = _topic(ctx, "trk-floor", ctx.n(4_000))

    def drain(df: Any, name: str) -> float:
        """The median time of the batches that read rows, the first two (warm-up) left out."""
        q = start_query(df, ctx.folder(name), lambda d, _b: d.count(), live=True)
        drained(q)
        return percentile(batch_ms(q)[2:], 0.5)

    def tracked(name: str, path: str) -> float:
        q = _tracked_count(ctx, topic, PER_TRIGGER, ctx.folder(name), path)[0]
        return percentile(batch_ms(q)[2:], 0.5)

    events = _events(ctx, topic, PER_TRIGGER)
    wm = drain(_watermark_windows(events, LATENCY_DELAY), "floor_wm")
    empty = drain(
        events.select(F.col("partition").cast("string").alias("source"))
        .groupBy("source")
        .transformWithStateInPandas(_count_per_key(), "source string, n long", "append", "none"),
        "floor_tws",
    )
    figure = partial(Figure, "tracker_floor", metric="batch time", unit="ms")
    note = f"{PER_TRIGGER} rows/batch, median batch time"
    return [
        figure("spark watermark windows (JVM)", value=wm, baseline=True, note=note),
        figure("empty transformWithStateInPandas", value=empty, note=f"{note}, 4 keys"),
        figure("tracker (gate + shard stages)", value=tracked("floor_tracked", "distributed"),
               note=note),
        figure("tracker driver path", value=tracked("floor_driver", "driver"), note=note),
    ]  # fmt: skip
