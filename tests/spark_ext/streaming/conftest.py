"""Helpers of the tracked-stream tests through real Spark: counts per window into Delta tables."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from connectors.delta.idempotent import DeltaIdempotentWriter
from spark_ext.operators import Count, WindowAggregate
from spark_ext.sinks.trigger import Trigger
from spark_ext.streaming import TrackedStream
from spark_ext.tracker import Tumbling

if TYPE_CHECKING:
    from pyspark.sql import DataFrame
    from pyspark.sql.streaming import StreamingQuery

    from spark_ext.streaming import Closing, TrackedQuery
    from spark_ext.tracker import LocalTrackingAgent


def count_per_window(
    events: DataFrame,
    agent: LocalTrackingAgent,
    closing: Closing,
    namespace: str,
    tmp_path: Path,
    **start: Any,
) -> tuple[TrackedQuery, StreamingQuery]:
    """Start counting ``events`` (``jobs.tracker_windows.parse``) per 10 s window and user,
    tracked by ``agent`` and closed by ``closing`` and ``close_through`` markers: the windows
    and the late rows go to the Delta tables ``tmp_path/windows`` and ``tmp_path/late``, a batch
    as soon as data comes. Returns the tracked query (its handler) and the running query."""
    counts = TrackedStream(
        events,
        key="user_id",
        event_time="event_time",
        agent=agent,
        closing=closing,
        close_marker="close_through",
    ).apply(Tumbling("10 seconds", namespace=namespace), WindowAggregate(Count()))
    query = counts.start(
        DeltaIdempotentWriter(str(tmp_path / "windows"), namespace),
        checkpoint=str(tmp_path / "chk"),
        late=DeltaIdempotentWriter(str(tmp_path / "late"), f"{namespace}.late"),
        trigger=Trigger(processing_time="0 seconds"),
        **start,
    )
    return counts, query
