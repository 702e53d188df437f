"""The ``foreachBatch`` sink of tagged rows: catalog, output and late rows, idempotent per batch.

:class:`DedupSink` writes what :func:`~spark_ext.dedup.operator.deduplicate` or
:func:`spark_ext.ordering.order_and_fold` tagged, with Spark's Delta writer and
``txnAppId``/``txnVersion`` = (sink id, batch id) on each table (docs/design.md, invariant 1).
Its fault points :data:`AFTER_CATALOG` and :data:`AFTER_OUTPUT` are declared at import.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from spark_ext.crash import declare
from spark_ext.dedup.catalog import DedupCatalog
from spark_ext.dedup.config import DedupConfig
from spark_ext.dedup.errors import LateRowsWithoutQuarantineError
from spark_ext.dedup.metrics import DedupMetrics
from spark_ext.dedup.tags import KIND_LATE, KIND_METRICS, KIND_NEW
from spark_ext.sinks.errors import check_batch_order
from spark_ext.sinks.protocol import validate_sink_id

__all__ = ["AFTER_CATALOG", "AFTER_OUTPUT", "DedupSink"]

log = logging.getLogger(__name__)

#: Fault points of :class:`DedupSink`, reached after each durable write of a batch.
AFTER_CATALOG = declare("dedup.after_catalog", "driver", "kept ids in the catalog, output not yet")
AFTER_OUTPUT = declare("dedup.after_output", "driver", "output appended, filter state not saved")


def _recorded_batch(path: str, app_id: str) -> int | None:
    """The ``txn`` version recorded for ``app_id`` in the Delta table at ``path`` (or None)."""
    from deltalake import DeltaTable
    from deltalake.exceptions import TableNotFoundError

    try:
        return DeltaTable(path).transaction_version(app_id)
    except TableNotFoundError:
        return None


class DedupSink:
    """``foreachBatch`` sink of tagged rows: catalog, output, quarantine; idempotent per batch.

    Takes the output of :func:`~spark_ext.dedup.operator.deduplicate` or of
    :func:`spark_ext.ordering.order_and_fold`. Steps per batch (fault points
    :data:`AFTER_CATALOG` and :data:`AFTER_OUTPUT` after steps 2 and 3):

    1. check the batch order (a batch below the one recorded on the output or the catalog:
       :class:`~spark_ext.sinks.errors.BatchRegressionError`, nothing written); persist the
       tagged batch (the stateful operator runs once) and read its metrics rows;
    2. append the kept ids to the catalog with ``txn(<sink id>.catalog, batch_id)``
       (skipped without a ``config``: no dedup, no catalog);
    3. append the kept rows to ``output_path`` with ``txn(sink_id, batch_id)``;
    4. append late rows (if any) to ``quarantine_path`` with ``txn(<sink id>.late, batch_id)``;
    5. purge catalog generations the filters no longer keep (any time is safe: lookups ignore
       them anyway), fold the metrics into :attr:`metrics` and log them.

    Spark re-runs a batch whose commit-log entry is missing; steps 2-4 are then skipped by
    Delta (same app id and version), and the operator's catalog rule keeps the decision.

    Parameters
    ----------
    config
        The dedup configuration of the operator that tagged the rows; ``None`` for rows that
        were not deduplicated (no catalog is written).
    output_path
        Delta table of the kept rows.
    sink_id
        Keys idempotence (``txnAppId``); derived ids are ``<sink id>.catalog`` and
        ``<sink id>.late``. Checked by :func:`~spark_ext.sinks.protocol.validate_sink_id`.
    output_columns
        Columns written (default: the batch's columns not starting with ``_``).
    quarantine_path
        Delta table of late rows (``_kind == "late"``, ordering buffer only). Without one, a
        batch with late rows raises
        :class:`~spark_ext.dedup.errors.LateRowsWithoutQuarantineError` (nothing written).
    """

    def __init__(
        self,
        config: DedupConfig | None,
        output_path: str,
        sink_id: str,
        output_columns: Sequence[str] | None = None,
        quarantine_path: str | None = None,
    ) -> None:
        self.config = config
        self.output_path = output_path
        self.sink_id = validate_sink_id(sink_id)
        self.output_columns = list(output_columns) if output_columns else None
        self.quarantine_path = quarantine_path
        self.catalog = DedupCatalog(config.catalog_path) if config else None
        self.metrics = DedupMetrics()
        self.batches: list[DedupMetrics] = []

    @property
    def catalog_app_id(self) -> str:
        """``txnAppId`` of the catalog appends: ``<sink id>.catalog``."""
        return f"{self.sink_id}.catalog"

    @property
    def late_app_id(self) -> str:
        """``txnAppId`` of the late-row appends: ``<sink id>.late``."""
        return f"{self.sink_id}.late"

    def _append(self, df: DataFrame, path: str, app_id: str, batch_id: int) -> None:
        (
            df.write.format("delta")
            .mode("append")
            .option("txnAppId", app_id)
            .option("txnVersion", batch_id)
            .save(path)
        )

    def _check_batch_order(self, batch_id: int) -> None:
        """X1 (docs/design.md, invariant 6): Spark's Delta writer skips a ``txnVersion`` at or
        below the recorded one silently; a batch *below* it is refused here instead."""
        targets = [(self.output_path, self.sink_id)]
        if self.catalog is not None:
            targets.append((self.catalog.path, self.catalog_app_id))
        if self.quarantine_path:
            targets.append((self.quarantine_path, self.late_app_id))
        for path, app_id in targets:
            check_batch_order(app_id, batch_id, _recorded_batch(path, app_id))

    def __call__(self, batch: DataFrame, batch_id: int) -> None:
        self._check_batch_order(batch_id)
        batch = batch.persist()
        try:
            metrics = DedupMetrics.of_buckets(
                DedupMetrics.from_json(r["_detail"])
                for r in batch.where(F.col("_kind") == KIND_METRICS).select("_detail").collect()
            )
            if metrics.late_rows and not self.quarantine_path:
                raise LateRowsWithoutQuarantineError(self.sink_id, batch_id, metrics.late_rows)
            kept = batch.where(F.col("_kind") == KIND_NEW)
            if self.catalog is not None and self.config is not None:
                record_id = F.col(self.config.id_column).cast("string")
                self.catalog.append_spark(
                    kept.select(
                        F.col("_generation").cast("long").alias("generation"),
                        F.col("_bucket").cast("int").alias("bucket"),
                        F.xxhash64(record_id).alias("hash"),
                        record_id.alias("record_id"),
                        F.concat_ws(
                            "/", *[F.col(c).cast("string") for c in self.config.coordinate_columns]
                        ).alias("coords"),
                        F.lit(batch_id).cast("long").alias("batch_id"),
                    ),
                    self.catalog_app_id,
                    batch_id,
                )
                AFTER_CATALOG.reached(batch_id)
            columns = self.output_columns or [c for c in batch.columns if not c.startswith("_")]
            self._append(kept.select(*columns), self.output_path, self.sink_id, batch_id)
            AFTER_OUTPUT.reached(batch_id)
            if self.quarantine_path and metrics.late_rows:
                late = batch.where(F.col("_kind") == KIND_LATE).select(*columns)
                self._append(late, self.quarantine_path, self.late_app_id, batch_id)
        finally:
            batch.unpersist()
        if self.catalog is not None and self.config is not None:
            self.catalog.purge_outside(metrics.newest_generation, self.config.generations)
        self.metrics = self.metrics + metrics
        self.batches.append(metrics)
        log.info(
            "batch %s: %s rows, lookups avoided %.1f%%, observed FP %.4f, state %s bytes, "
            "buffered %s",
            batch_id,
            metrics.rows,
            100 * metrics.lookups_avoided,
            metrics.observed_fp_rate,
            metrics.state_bytes,
            metrics.buffered_rows,
        )
