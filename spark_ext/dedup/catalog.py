"""The exact, durable dedup catalog: every kept id, with the coordinates of its kept copy.

One Delta table, one schema (:data:`CATALOG_SCHEMA`) whoever writes it, partitioned by filter
``generation``; its appends, lookups and purge: docs/design.md, "Dedup", one catalog.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from spark_ext.sinks.delta_txn import DeltaTxnAppender, LatestTable, marker_app_id
from spark_ext.storage import StorageSettings

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from spark_ext.dedup.config import DedupConfig

__all__ = ["CATALOG_SCHEMA", "DedupCatalog", "catalog_app_id"]

log = logging.getLogger(__name__)

#: The catalog's columns, in this order, whoever writes it.
CATALOG_SCHEMA = pa.schema(
    [
        ("generation", pa.int64()),
        ("bucket", pa.int32()),
        ("hash", pa.int64()),
        ("record_id", pa.string()),
        ("coords", pa.string()),
        ("batch_id", pa.int64()),
    ]
)
PARTITION_BY = ["generation"]


def catalog_app_id(sink_id: str) -> str:
    """The catalog's batch marker of ``sink_id``: ``txn.appId`` ``<sink id>:catalog``."""
    return marker_app_id(sink_id, "catalog")


#: Catalog tables opened by this process (a reused Python worker refreshes incrementally).
_OPEN_TABLES: dict[str, LatestTable] = {}


class DedupCatalog:
    """The catalog table at ``path`` (created by the first append; delta-rs reads it in
    executors too); ``settings``: of a ``path`` on object storage (docs/design.md, "Object
    storage", settings in tasks)."""

    def __init__(self, path: str, settings: StorageSettings | None = None) -> None:
        self.path = str(path)
        self.settings = settings
        self._purged_below = 0

    @classmethod
    def of(cls, config: DedupConfig) -> DedupCatalog:
        """The catalog ``config`` names, reached with its settings."""
        return cls(config.catalog_path, config.storage)

    def _open(self) -> Any:
        """The table at its newest version (kept open for the process), ``None`` before the
        first append."""
        latest = _OPEN_TABLES.get(self.path)
        if latest is None:
            latest = _OPEN_TABLES[self.path] = LatestTable(self.path, self.settings)
        return latest.get()

    def _changed(self) -> None:
        _OPEN_TABLES.pop(self.path, None)

    def lookup_ids(self, bucket: int, ids: list[str], min_generation: int) -> dict[str, str]:
        """Coordinates of the kept copy of each of ``ids`` held for ``bucket`` in a generation
        at or above ``min_generation``."""
        if not ids:
            return {}
        table = self._open()
        if table is None:
            return {}
        found = table.to_pyarrow_dataset().to_table(
            columns=["record_id", "coords"],
            filter=(pc.field("generation") >= min_generation)
            & (pc.field("bucket") == bucket)
            & pc.field("record_id").isin(pa.array(ids, pa.string())),
        )
        return dict(zip(found["record_id"].to_pylist(), found["coords"].to_pylist(), strict=True))

    def lookup_hashes(
        self, hashes: np.ndarray, before_batch: int, bucket: int | None = None
    ) -> pa.Table:
        """Rows (``bucket``, ``generation``, ``hash``, ``record_id``) whose hash is one of
        ``hashes`` (int64) and whose batch is below ``before_batch`` (of ``bucket`` only, when
        given: files whose statistics hold no row of it are not read)."""
        columns = ["bucket", "generation", "hash", "record_id"]
        table = self._open() if len(hashes) else None
        if table is None:
            return pa.schema([CATALOG_SCHEMA.field(c) for c in columns]).empty_table()
        where = (pc.field("batch_id") < before_batch) & pc.field("hash").isin(
            pa.array(hashes, pa.int64())
        )
        if bucket is not None:
            where = (pc.field("bucket") == bucket) & where
        return table.to_pyarrow_dataset().to_table(columns=columns, filter=where)

    def last_batch(self, app_id: str) -> int | None:
        """The batch id recorded for ``app_id`` (``None``: none, or no table yet)."""
        table = self._open()
        return None if table is None else table.transaction_version(app_id)

    def appender(
        self, sink_id: str, take_over: bool = False, spark_writes: bool = True
    ) -> DeltaTxnAppender:
        """The writer of ``sink_id``'s catalog rows with Spark's Delta writer (batch marker
        ``<sink id>:catalog``; ``spark_writes=False``: only its marks, the rows committed with
        delta-rs)."""
        return DeltaTxnAppender(
            self.path,
            sink_id,
            marker=catalog_app_id(sink_id),
            partition_by=PARTITION_BY,
            take_over=take_over,
            settings=self.settings,
            spark_writes=spark_writes,
        )

    def append_spark(self, appender: DeltaTxnAppender, rows: DataFrame, batch_id: int) -> None:
        """Append ``rows`` (the :data:`CATALOG_SCHEMA` columns) through ``appender``
        (:meth:`appender`, claimed and checked by the caller)."""
        appender.write(rows.select(*CATALOG_SCHEMA.names), batch_id)
        self._changed()

    def purge(self, older_than_generation: int) -> None:
        """Delete the ids of generations the filters no longer keep (bounds the catalog)."""
        from deltalake import CommitProperties

        table = self._open()
        if table is not None:
            floor = int(older_than_generation)
            mark = CommitProperties(custom_metadata={"spark_ext.catalog_purge": str(floor)})
            table.delete(f"generation < {floor}", commit_properties=mark)
            self._changed()

    def purge_outside(self, newest_generation: int, generations: int) -> None:
        """Purge the generations below the dedup window ending at ``newest_generation`` (only
        when the window's floor moved since this catalog's last purge)."""
        floor = newest_generation - generations + 1
        if floor > self._purged_below:
            self.purge(floor)
            self._purged_below = floor
