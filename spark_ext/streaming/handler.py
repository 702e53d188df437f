"""The driver's per-batch steps of a tracked query: 1. collect the reports; 2. write results and
late rows; 3. apply the reports; 4. Spark commits (docs/design.md, "Tracked queries")."""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from spark_ext.crash import declare
from spark_ext.errors import ConfigError
from spark_ext.streaming.envelope import (
    KIND_LATE,
    KIND_REPORT,
    KIND_RESULT,
    LATE_COLUMNS,
    LATE_SCHEMA,
    LATE_SOURCE,
    REASON_IDLE,
)
from spark_ext.streaming.idle import IdlePolicy
from spark_ext.tracker.agent import TrackerFigures, TrackingAgent
from spark_ext.tracker.reports import TaskReport, batch_reports

AFTER_SINK = declare("tracker.after_sink", "driver", "results written, reports not applied")
AFTER_REPORTS = declare("tracker.after_reports", "driver", "reports applied, Spark commit not yet")

__all__ = ["AFTER_REPORTS", "AFTER_SINK", "BatchHandler", "Writer", "forward_records"]

log = logging.getLogger(__name__)


class BatchWriter(Protocol):
    """A writer object: ``write(df, batch_id)``, idempotent per batch id."""

    def write(self, df: DataFrame, batch_id: int) -> None: ...


Writer = Callable[[DataFrame, int], None] | BatchWriter


def as_callable(writer: Writer, setting: str) -> Callable[[DataFrame, int], None]:
    """``writer`` as ``fn(df, batch_id)``; a ConfigError names ``setting`` if it is neither."""
    write = getattr(writer, "write", None)
    if callable(write):
        return write
    if callable(writer):
        return writer
    raise ConfigError(setting, f"must be callable (df, batch_id) or have write(); got {writer!r}")


def forward_records(df: DataFrame, record_ids: bool = False) -> DataFrame:
    """Result rows as Kafka ``key`` / ``value`` (JSON of every column) for a downstream query,
    to write with an exactly-once Kafka writer (docs/design.md, "Tracked queries")."""
    cols = [
        F.col("key").cast("string").alias("key"),
        F.to_json(F.struct(*df.columns)).alias("value"),
    ]
    if record_ids:
        cols.append(
            F.concat_ws("/", "fwd_substream", F.col("fwd_label").cast("string")).alias("record_id")
        )
    return df.select(*cols)


@dataclass
class BatchHandler:
    """The driver's per-batch steps 1-3; Spark does step 4."""

    query: str
    agent: TrackingAgent
    sink: Callable[[DataFrame, int], None]
    late_sink: Callable[[DataFrame, int], None]
    columns: list[str]
    #: The agent's state-size figures after the last batch (None before the first).
    figures: TrackerFigures | None = None
    #: Late rows written by this handler (the late-rows metric), by reason.
    late_rows: dict[str, int] = field(default_factory=dict)
    namespace: str = ""
    sources: tuple[str, ...] = ()
    idle: IdlePolicy | None = None

    def _idle_decisions(self) -> list[tuple[str, int]]:
        if self.idle is None or not self.sources:
            return []
        progress, oldest_end = self.agent.frontier(self.namespace)  # no copy of the state
        return self.idle.decide(self.sources, progress, oldest_end, time.time() * 1000)

    def _downgrades(self, df: DataFrame, decisions: list[tuple[str, int]]) -> DataFrame:
        now = int(time.time() * 1000)
        rows = []
        for source, through in decisions:
            topic, _, part = source.rpartition(":")
            raw = json.dumps({"declared_at_ms": now, "through_ms": through}, sort_keys=True)
            rows.append((topic, int(part), None, None, through, None, REASON_IDLE, raw))
        return df.sparkSession.createDataFrame(rows, LATE_SCHEMA)

    def __call__(self, df: DataFrame, batch_id: int) -> None:
        df.persist()
        try:
            # 1: reports and late-row counts in one job (the df is persisted for the writers)
            meta = (
                df.where(F.col("kind").isin(KIND_REPORT, KIND_LATE))
                .groupBy("kind", "reason", "report")
                .agg(F.count("*").alias("n"))
                .collect()
            )
            rows = [r for r in meta if r["kind"] == KIND_REPORT for _ in range(int(r["n"]))]
            counts = {r["reason"]: int(r["n"]) for r in meta if r["kind"] == KIND_LATE}
            results = df.where(F.col("kind") == KIND_RESULT).select(*self.columns)
            late = df.where(F.col("kind") == KIND_LATE).select(
                *[F.col(LATE_SOURCE.get(c, c)).alias(c) for c in LATE_COLUMNS]
            )
            reports = [TaskReport.from_json(r.report) for r in rows]
            self.deliver(batch_id, results, late, counts, reports)
        finally:
            df.unpersist()

    def deliver(
        self,
        batch_id: int,
        results: DataFrame,
        late: DataFrame,
        counts: dict[str, int],
        task_reports: list[TaskReport],
    ) -> None:
        """Steps 2 and 3 of batch ``batch_id`` (``counts``: its late rows by reason)."""
        self.sink(results, batch_id)  # 2
        idle = self._idle_decisions()
        if idle:  # completeness downgrades, recorded with the batch's late rows
            late = late.unionByName(self._downgrades(results, idle))
            counts[REASON_IDLE] = len(idle)
        if counts:
            self.late_sink(late, batch_id)
            for reason, n in counts.items():
                self.late_rows[reason] = self.late_rows.get(reason, 0) + n
            log.warning("[%s] batch %d: late rows %s", self.query, batch_id, counts)
        AFTER_SINK.reached(batch_id)
        reports = batch_reports(self.query, batch_id, task_reports)
        ends = self.agent.apply(reports)  # 3
        AFTER_REPORTS.reached(batch_id)
        for source, through in idle:  # close the idle partitions (markers after their rows)
            topic, _, part = source.rpartition(":")
            assert self.idle is not None
            self.idle.mark(topic, int(part), through)
            log.warning("[%s] partition %s idle: closed through %d", self.query, source, through)
        self.figures = self.agent.figures()
        log.info(
            "[%s] batch %d: %d reports, %d substreams ended; %s",
            self.query,
            batch_id,
            len(reports),
            len(ends),
            self.figures.line(),
        )
