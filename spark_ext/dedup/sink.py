"""The ``foreachBatch`` sink of tagged rows: catalog, output and late rows, idempotent per batch."""

from __future__ import annotations

import logging
from collections.abc import Sequence

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from spark_ext.crash import declare
from spark_ext.dedup.catalog import CATALOG_SCHEMA, DedupCatalog, catalog_app_id
from spark_ext.dedup.config import DedupConfig
from spark_ext.dedup.errors import LateRowsWithoutQuarantineError
from spark_ext.dedup.metrics import DedupMetrics
from spark_ext.dedup.tags import KIND_LATE, KIND_METRICS, KIND_NEW
from spark_ext.sinks.delta_txn import DeltaTxnAppender, arrow_schema, marker_app_id
from spark_ext.sinks.owner import SinkOwner, owner_of

__all__ = ["AFTER_CATALOG", "AFTER_OUTPUT", "DedupSink"]

log = logging.getLogger(__name__)

AFTER_CATALOG = declare("dedup.after_catalog", "driver", "kept ids in the catalog, output not yet")
AFTER_OUTPUT = declare("dedup.after_output", "driver", "output appended, filter state not saved")


class DedupSink:
    """``foreachBatch`` sink of the rows ``deduplicate`` or ``order_and_fold`` tagged, each
    table through a :class:`~spark_ext.sinks.delta_txn.DeltaTxnAppender`. Per batch:

    1. metrics rows read; late rows need a ``quarantine_path``; owner, order, expiry checked;
    2. the kept ids to the catalog, ``txn(<sink id>:catalog, N)`` (:data:`AFTER_CATALOG`);
    3. the kept rows to ``output_path``, ``txn(<sink id>, N)`` (:data:`AFTER_OUTPUT`);
    4. late rows to ``quarantine_path``, ``txn(<sink id>:late, N)``;
    5. the catalog purged to the window, the metrics folded into :attr:`metrics` and logged.

    A table that recorded the batch skips its step (docs/design.md, "Dedup", ``DedupSink``).
    ``config`` is ``None`` for rows not deduplicated (no catalog); ``output_columns`` default
    to the columns not starting with ``_``; ``owner`` to the query calling the sink.
    """

    def __init__(
        self,
        config: DedupConfig | None,
        output_path: str,
        sink_id: str,
        output_columns: Sequence[str] | None = None,
        quarantine_path: str | None = None,
        *,
        owner: SinkOwner | None = None,
        take_over: bool = False,
    ) -> None:
        self.config = config
        self.output_path = output_path
        self.output = DeltaTxnAppender(output_path, sink_id, take_over=take_over)
        self.sink_id = self.output.sink_id
        self.output_columns = list(output_columns) if output_columns else None
        self.quarantine_path = quarantine_path
        self.owner = owner
        self.catalog = DedupCatalog.of(config) if config else None
        self.catalog_writer = (
            self.catalog.appender(self.sink_id, take_over) if self.catalog else None
        )
        self.late = (
            DeltaTxnAppender(
                quarantine_path, self.sink_id, marker=self.late_app_id, take_over=take_over
            )
            if quarantine_path
            else None
        )
        self.metrics = DedupMetrics()
        self.batches: list[DedupMetrics] = []

    @property
    def catalog_app_id(self) -> str:
        """``txnAppId`` of the catalog appends: ``<sink id>:catalog``."""
        return catalog_app_id(self.sink_id)

    @property
    def late_app_id(self) -> str:
        """``txnAppId`` of the late-row appends: ``<sink id>:late``."""
        return marker_app_id(self.sink_id, "late")

    def _claim(self, batch: DataFrame, columns: list[str]) -> None:
        """At the first call of a run: the owner decided on every table, then recorded."""
        owner = owner_of(batch, self.owner, f"DedupSink({self.sink_id!r})")
        if self.output.owner == owner:
            return
        rows = arrow_schema(batch.select(*columns).schema)
        tables = [(self.output, rows, True)]
        if self.catalog_writer is not None:
            tables.append((self.catalog_writer, CATALOG_SCHEMA, True))
        if self.late is not None:  # rarely written: its expiry is judged per batch
            tables.append((self.late, rows, False))
        for appender, _, _ in tables:  # a stranger is refused before anything is recorded
            appender.decide(owner)
        for appender, schema, refuse_expired in tables:
            appender.claim(owner, schema, refuse_expired=refuse_expired)

    def _check(self, batch_id: int) -> tuple[bool, bool, bool]:
        """Batch order (invariant 6) and expiry of every table before any is written: whether
        the catalog, the output and the late rows recorded this batch (a replay)."""
        output = self.output.check(batch_id)
        catalog = self.catalog_writer.check(batch_id) if self.catalog_writer else False
        # new for the late rows if the output has not recorded it (docs/design.md, "Delta sinks")
        late = self.late.check(batch_id, known_new=not output) if self.late else False
        return catalog, output, late

    def __call__(self, batch: DataFrame, batch_id: int) -> None:
        batch = batch.persist()
        try:
            metrics = DedupMetrics.of_buckets(
                DedupMetrics.from_json(r["_detail"])
                for r in batch.where(F.col("_kind") == KIND_METRICS).select("_detail").collect()
            )
            if metrics.late_rows and not self.quarantine_path:
                raise LateRowsWithoutQuarantineError(self.sink_id, batch_id, metrics.late_rows)
            columns = self.output_columns or [c for c in batch.columns if not c.startswith("_")]
            self._claim(batch, columns)
            catalog_done, output_done, late_done = self._check(batch_id)
            kept = batch.where(F.col("_kind") == KIND_NEW)
            if self.catalog_writer is not None and self.config is not None:
                if not catalog_done:
                    record_id = F.col(self.config.id_column).cast("string")
                    rows = kept.select(
                        F.col("_generation").cast("long").alias("generation"),
                        F.col("_bucket").cast("int").alias("bucket"),
                        F.xxhash64(record_id).alias("hash"),
                        record_id.alias("record_id"),
                        F.concat_ws(
                            "/", *[F.col(c).cast("string") for c in self.config.coordinate_columns]
                        ).alias("coords"),
                        F.lit(batch_id).cast("long").alias("batch_id"),
                    )
                    assert self.catalog is not None
                    self.catalog.append_spark(self.catalog_writer, rows, batch_id)
                AFTER_CATALOG.reached(batch_id)
            if not output_done:
                self.output.write(kept.select(*columns), batch_id)
            AFTER_OUTPUT.reached(batch_id)
            if self.late is not None and metrics.late_rows and not late_done:
                late = batch.where(F.col("_kind") == KIND_LATE).select(*columns)
                self.late.write(late, batch_id)
        finally:
            batch.unpersist()
        if self.catalog is not None and self.config is not None:
            self.catalog.purge_outside(metrics.newest_generation, self.config.generations)
        self.metrics = self.metrics + metrics
        self.batches.append(metrics)
        log.info("%s batch %s: %s", self.sink_id, batch_id, metrics)
