"""A window is released in the micro-batch that completes it (no driver round trip).

The batch that carries the row (or close marker) moving the last partition's frontier past a
window's end emits that window's result; before, the end event was written after batch N by
the driver and read back by batch N+1, so every window came one batch late.
Pure: :class:`~spark_ext.streaming.tester.PipelineTester` wires the same executor functions as
the Spark plan.
"""

from __future__ import annotations

from spark_ext.operators import Count, SessionWindow, WindowAggregate
from spark_ext.streaming import Closing
from spark_ext.streaming.tester import PipelineTester
from spark_ext.tracker import Tumbling


def row(p: int, offset: int, key: str | None, t: int | None, close: int | None = None) -> dict:
    return {"partition": p, "offset": offset, "key": key, "event_time_ms": t, "close": close}


def test_window_is_released_in_the_batch_whose_rows_move_every_frontier_past_its_end():
    t = PipelineTester(
        WindowAggregate(Count()), Tumbling(10_000, namespace="w"), Closing.partitions("src", 2)
    )
    first, _ = t.run_batch(
        [
            row(0, 0, "a", 1_000),
            row(1, 0, "b", 2_000),
            row(0, 1, "a", 9_000),
            row(1, 1, "a", 12_000),
        ]
    )
    assert first.empty  # partition 0 is still inside [0, 10 s)
    closing, late = t.run_batch([row(0, 2, "c", 10_500)])  # partition 0 passes 10 s
    got = sorted(zip(closing["window_end_ms"], closing["key"], closing["count"], strict=True))
    assert got == [(10_000, "a", 2), (10_000, "b", 1)]
    assert late.empty
    assert t.run_batch([])[0].empty  # released once


def test_close_markers_release_windows_and_sessions_in_their_own_batch():
    t = PipelineTester(
        SessionWindow(1_000, Count()), Tumbling(1_000, namespace="s"), Closing.partitions("src", 2)
    )
    first, _ = t.run_batch([row(0, 0, "a", 100), row(1, 0, "a", 500), row(1, 1, "b", 700)])
    assert first.empty
    out, _ = t.run_batch([row(0, 1, None, None, close=5_000), row(1, 2, None, None, close=5_000)])
    got = sorted(zip(out["key"], out["session_start_ms"], out["session_end_ms"], strict=True))
    assert got == [("a", 100, 1_500), ("b", 700, 1_700)]
