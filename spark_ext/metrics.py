"""Per-batch progress: one log line per micro-batch, and the figures kept for tests and benchmarks.

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

__all__ = ["BatchFigures", "ProgressListener", "figures_from_progress"]

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

    def line(self) -> str:
        name = self.query_name or self.query_id[:8]
        return (
            f"[{name}] batch {self.batch_id}: {self.input_rows} rows, "
            f"{self.rows_per_second:,.0f} rows/s, {self.duration_ms} ms, "
            f"state rows {self.state_rows}"
        )


def figures_from_progress(progress: dict[str, Any]) -> BatchFigures:
    """Figures from a ``StreamingQueryProgress`` as JSON (``query.lastProgress``)."""
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
    )


class ProgressListener(StreamingQueryListener):
    """Logs one line per batch and keeps every :class:`BatchFigures` it saw."""

    def __init__(self, echo: bool = True) -> None:
        self.echo = echo
        self._lock = threading.Lock()
        self._figures: list[BatchFigures] = []

    @classmethod
    def attach(cls, spark: SparkSession, echo: bool = True) -> ProgressListener:
        listener = cls(echo=echo)
        spark.streams.addListener(listener)
        return listener

    def onQueryStarted(self, event: Any) -> None:
        log.info("query %s started (run %s)", event.name or event.id, event.runId)

    def onQueryProgress(self, event: Any) -> None:
        figures = figures_from_progress(json.loads(event.progress.json))
        with self._lock:
            self._figures.append(figures)
        if self.echo:
            log.info("%s", figures.line())

    def onQueryIdle(self, event: Any) -> None:
        pass

    def onQueryTerminated(self, event: Any) -> None:
        if event.exception:
            log.error("query %s failed: %s", event.id, event.exception)

    def figures(self) -> list[BatchFigures]:
        with self._lock:
            return list(self._figures)

    def figures_for(self, query_id: Any) -> list[BatchFigures]:
        return [f for f in self.figures() if f.query_id == str(query_id)]
