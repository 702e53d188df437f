"""Per-batch progress: one log line per micro-batch (batch id, rows, the last commit step this
driver reached, the offsets still to read), and the figures kept for tests and benchmarks
(docs/design.md, "A job that talks").

>>> listener = ProgressListener.attach(spark)     # doctest: +SKIP
>>> q = df.writeStream...start(); q.awaitTermination()  # doctest: +SKIP
>>> listener.figures_for(q.id)[-1].input_rows      # doctest: +SKIP
"""

from __future__ import annotations

import json
import logging
import threading
from dataclasses import dataclass
from typing import Any

from pyspark.sql import SparkSession
from pyspark.sql.streaming import StreamingQueryListener

from spark_ext.crash import last_reached

__all__ = [
    "BatchFigures",
    "ProgressListener",
    "figures_from_progress",
    "kafka_offsets",
    "source_lag",
]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class BatchFigures:
    """What one micro-batch did."""

    query_id: str
    query_name: str | None
    batch_id: int
    input_rows: int
    rows_per_second: float
    duration_ms: int
    state_rows: int
    state_bytes: int
    #: Offsets between the batch's end and the newest the sources had (``None``: not known).
    lag: int | None = None
    #: The last fault point (commit step) this driver reached in the batch, if any.
    step: str | None = None

    def line(self) -> str:
        name = self.query_name or self.query_id[:8]
        lag = "-" if self.lag is None else f"{self.lag:,}"
        return (
            f"[{name}] batch {self.batch_id}: {self.input_rows} rows, "
            f"step {self.step or '-'}, lag {lag}, {self.duration_ms} ms, "
            f"{self.rows_per_second:,.0f} rows/s, state rows {self.state_rows}"
        )


def kafka_offsets(value: Any) -> dict[str, dict[str, int]] | None:
    """``value`` (JSON or parsed) if it is a Kafka source's offsets, ``{"topic": {"0": 5}}``."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            return None
    if isinstance(value, dict) and all(
        isinstance(parts, dict)
        and all(isinstance(p, str) and p.isdigit() and isinstance(o, int) for p, o in parts.items())
        for parts in value.values()
    ):
        return value
    return None


def source_lag(sources: list[dict[str, Any]]) -> int | None:
    """Offsets from each source's ``endOffset`` to its ``latestOffset``, summed (``None`` when
    a source does not report both, as a non-Kafka source does)."""
    total = 0
    for source in sources:
        end = kafka_offsets(source.get("endOffset"))
        latest = kafka_offsets(source.get("latestOffset"))
        if end is None or latest is None:
            return None
        for topic, parts in latest.items():
            done = end.get(topic, {})
            total += sum(max(0, int(o) - int(done.get(p, 0))) for p, o in parts.items())
    return total


def figures_from_progress(progress: dict[str, Any], step: str | None = None) -> BatchFigures:
    """Figures from a ``StreamingQueryProgress`` as JSON (``query.lastProgress``) and the last
    ``step`` reached in its batch."""
    ops = progress.get("stateOperators") or []
    return BatchFigures(
        query_id=str(progress["id"]),
        query_name=progress.get("name"),
        batch_id=int(progress["batchId"]),
        input_rows=int(progress.get("numInputRows") or 0),
        rows_per_second=float(progress.get("processedRowsPerSecond") or 0.0),
        duration_ms=int((progress.get("durationMs") or {}).get("triggerExecution", 0)),
        state_rows=sum(int(op.get("numRowsTotal") or 0) for op in ops),
        state_bytes=sum(int(op.get("memoryUsedBytes") or 0) for op in ops),
        lag=source_lag(progress.get("sources") or []),
        step=step,
    )


class ProgressListener(StreamingQueryListener):
    """Logs one line per batch and keeps every :class:`BatchFigures` it saw."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._figures: list[BatchFigures] = []

    @classmethod
    def attach(cls, spark: SparkSession) -> ProgressListener:
        listener = cls()
        spark.streams.addListener(listener)
        return listener

    def onQueryStarted(self, event: Any) -> None:
        log.info("query %s started (run %s)", event.name or event.id, event.runId)

    def onQueryProgress(self, event: Any) -> None:
        progress = json.loads(event.progress.json)
        figures = figures_from_progress(progress, last_reached(int(progress["batchId"])))
        with self._lock:
            self._figures.append(figures)
        log.info("%s", figures.line())

    def onQueryTerminated(self, event: Any) -> None:
        if event.exception:  # its first line: the job reports the cause (or the whole trace)
            log.error("query %s failed: %s", event.id, str(event.exception).splitlines()[0][:300])

    def figures_for(self, query_id: Any) -> list[BatchFigures]:
        with self._lock:
            return [f for f in self._figures if f.query_id == str(query_id)]
