"""Dedup decided on the driver in front of the two-phase Delta sink: no shuffle, no state store.

:func:`spark_ext.dedup.operator.deduplicate` is a stateful operator: every row is shuffled to its
bucket and travels through a Python worker and back, and its sink then writes output and
catalog with two more Spark jobs. :class:`DeltaDedupSink` does the same dedup as a
``foreachBatch`` sink that reads the batch once:

1. ``decided``: one ``mapInArrow`` pass over the batch. Each task stages its rows as a Parquet
   file in the output table's folder (referenced by no Delta version yet) and their *keys* --
   the id's ``xxhash64``, the id, the event time, the coordinates -- as an Arrow file under
   ``state_path``. The driver reads the keys and decides every row: a copy of an id seen
   earlier in the batch is a duplicate (exact; the first in the total order event time,
   coordinates is kept); a row the Bloom filter of its bucket has certainly not seen is new;
   on a Bloom "maybe" the exact catalog is asked, where only rows of *earlier* batches count
   (``batch_id < N``), so a replay of batch N decides exactly as its first attempt did.
2. ``cataloged``: the kept ids are appended to the catalog (a Delta table partitioned by filter
   generation) by delta-rs in one commit with ``txn(<sink id>.catalog, N)`` (a replay finds
   the txn and skips). Meanwhile tasks rewrite each staged file that holds a dropped row,
   without it (Parquet to Parquet, no row goes through the JVM again).
3. ``written``: one delta-rs commit adds the staged files to the output with
   ``txn(<sink id>, N)`` (:class:`connectors.delta_sink.DeltaCommitter`, whose own crash
   points are ``delta2pc.2``-``delta2pc.4``); leftovers are removed.
4. ``saved``: the filters after batch N are saved as state version N (an atomic file under
   ``state_path``); batch N always starts from the newest version below N, so a batch killed
   after saving is replayed from the same filters.

Steps 2-4 are idempotent per (sink id, batch id), so a SIGKILL at any point and Spark's replay
of the batch from its checkpoint give the output of a run that never crashed. Crash points are
``dedup_delta.<step number>.<step name>``.

The decision itself (pure, no Spark) is :func:`spark_ext.dedup.batch.decide_batch`, the
filters' versioned state :class:`spark_ext.dedup.state.BloomStateStore`, the catalog
:class:`spark_ext.dedup.catalog.DedupCatalog` (the one schema every dedup writer uses); this
module is the Spark and Delta I/O around them, in the connectors layer (docs/design.md, Layers).
Semantics are those of :mod:`spark_ext.dedup` (same :class:`~spark_ext.dedup.DedupConfig`):
copies whose original's generation rotated out of the filters are treated as new. Rows whose
id, event time or a coordinate is null are not deduplicated: they go to ``quarantine_path``
with the reason (or the batch fails with :class:`DedupInputError` without one).

Scaling: the driver holds one batch's keys (about 40 bytes a row) and the filters; executors
read, stage and rewrite. ``state_path`` and the output folder must be reachable from both
(local or mounted paths, like the two-phase Delta sink). For batches far beyond a few million
rows per trigger, use the stateful operator, which spreads the buckets over tasks.

Example
-------
>>> from spark_ext.dedup import DedupConfig
>>> config = DedupConfig(catalog_path="var/orders/_catalog", capacity=10_000_000)
>>> sink = DeltaDedupSink(config, "var/orders/unique", "orders", "var/orders/_dedup_state")
>>> orders.writeStream.foreachBatch(sink).option("checkpointLocation", cp).start()  # doctest: +SKIP
"""

from __future__ import annotations

import logging
import shutil
import struct
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pyarrow as pa
from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import (
    StringType,
    TimestampNTZType,
    TimestampType,
)

from connectors.dedup_delta_staging import MESSAGE_SCHEMA, Staged, coords_of, rewrite, stager
from connectors.delta_sink import (
    DeltaCommitter,
    DeltaIdempotentWriter,
    StagedFile,
    ensure_table,
    schema_shape,
)
from spark_ext.dedup.batch import (
    DEDUP_DELTA,
    KEY_ET,
    KEY_HASH,
    KEY_ID,
    REASON_NULL_KEY,
    decide_batch,
)
from spark_ext.dedup.catalog import DedupCatalog
from spark_ext.dedup.config import DedupConfig
from spark_ext.dedup.errors import BloomFormatError, DedupInputError, DedupStateError
from spark_ext.dedup.filters import RotatingBloom
from spark_ext.dedup.metrics import DedupMetrics
from spark_ext.dedup.state import BloomStateStore
from spark_ext.errors import ConfigError
from spark_ext.sinks.errors import check_batch_order
from spark_ext.sinks.protocol import commit_batch, validate_sink_id

__all__ = ["DeltaDedupSink"]

log = logging.getLogger(__name__)


class DeltaDedupSink:
    """``foreachBatch`` sink: Bloom-fronted dedup decided on the driver, output to Delta.

    Parameters
    ----------
    config
        What to deduplicate on (:class:`~spark_ext.dedup.DedupConfig`; ``catalog_path`` is the
        exact catalog).
    output_path
        The Delta table of kept rows (created on the first batch).
    sink_id
        Keys idempotence: ``txn(sink_id, batch)`` on the output, ``txn(sink_id.catalog,
        batch)`` on the catalog. Stable for the life of the output.
    state_path
        Folder of the filters' versioned state and of the staged keys; belongs with the
        query's checkpoint. Like the output folder, executors and driver must both reach it.
    quarantine_path
        Delta table for rows with a null id, event time or coordinate (with ``_reason``).
    output_columns
        Columns written (default: all of the batch's).
    """

    def __init__(
        self,
        config: DedupConfig,
        output_path: str | Path,
        sink_id: str,
        state_path: str | Path,
        quarantine_path: str | Path | None = None,
        output_columns: Sequence[str] | None = None,
    ) -> None:
        self.config = config
        self.output_path = str(output_path)
        self.sink_id = validate_sink_id(sink_id)
        self.state = BloomStateStore(Path(state_path) / "filters")
        self.keys_path = Path(state_path) / "keys"
        self.quarantine_path = str(quarantine_path) if quarantine_path else None
        self.output_columns = list(output_columns) if output_columns else None
        self.catalog = DedupCatalog(config.catalog_path)
        self.metrics = DedupMetrics()
        self.batches: list[DedupMetrics] = []
        self._recovered = False
        self._output: DeltaCommitter | None = None

    @property
    def catalog_app_id(self) -> str:
        return f"{self.sink_id}.catalog"

    def _key_columns(self) -> list[str]:
        c = self.config
        return [c.id_column, c.event_time_column, *c.coordinate_columns]

    def _load_blooms(self, batch_id: int) -> dict[int, RotatingBloom]:
        version, stored = self.state.load_before(batch_id)
        blooms = {}
        for bucket, data in stored.items():
            bloom = self.config.new_bloom()
            try:
                bloom.load_bytes(data)
            except (BloomFormatError, struct.error) as exc:
                raise DedupStateError(
                    f"{self.state.path} v{version} bucket {bucket}: {exc}"
                ) from exc
            blooms[bucket] = bloom
        return blooms

    def _committer(self) -> DeltaCommitter:
        """The output's committer: one per sink, so the run epoch of :meth:`_start`'s fence
        is the one every commit of this sink checks."""
        if self._output is None:
            self._output = DeltaCommitter(self.output_path, self.sink_id)
        return self._output

    def _start(self, batch: DataFrame, batch_id: int) -> list[str]:
        """Check the columns; on the first batch, create the output and drop orphans."""
        columns = self.output_columns or batch.columns
        missing = [x for x in {*self._key_columns(), *columns} if x not in batch.columns]
        if missing:
            raise ConfigError("dedup.columns", f"columns {missing} are not in {batch.columns}")
        if not self._recovered:
            ensure_table(self.output_path, batch.select(*columns).schema)
            # Refuses (DeltaTxnExpiredError) when the txn is gone next to committed files;
            # fences older drivers of this sink, then removes staging no snapshot references.
            self._committer().recover(fence=True)
            self._recovered = True
        # Keys staged by earlier (killed) attempts of other batches are of no use.
        if self.keys_path.exists():
            for old in self.keys_path.iterdir():
                if old.name != f"b{batch_id:012d}":
                    shutil.rmtree(old, ignore_errors=True)
        return columns

    def _check_batch_order(self, batch_id: int) -> None:
        """X1 (docs/design.md, invariant 6): a batch below the one recorded on the output or
        the catalog raises :class:`~spark_ext.sinks.errors.BatchRegressionError` before
        anything of it is staged and before the start-up recovery; the recorded batch itself is
        a replay and runs again (its commits are skipped, its filters are saved again)."""
        if (Path(self.output_path) / "_delta_log").is_dir():
            check_batch_order(self.sink_id, batch_id, self._committer().last_committed_batch())
        check_batch_order(
            self.catalog_app_id, batch_id, self.catalog.last_batch(self.catalog_app_id)
        )

    def __call__(self, batch: DataFrame, batch_id: int) -> None:
        c = self.config
        self._check_batch_order(batch_id)
        columns = self._start(batch, batch_id)

        # 1. one pass: stage every row, and its keys; decide on the driver.
        staged = self._stage(batch, columns, batch_id)
        nulls = sum(s.null_rows for s in staged)
        if nulls:
            self._quarantine_nulls(batch, batch_id, nulls, staged)
        table, file_of_row, row_in_file = self._read_keys(staged)
        blooms = self._load_blooms(batch_id)
        decision = decide_batch(table, c, blooms, self.catalog.lookup_hashes, batch_id)
        DEDUP_DELTA.reached(1, batch_id)

        # 2. catalog (delta-rs, in the background) while the tasks drop the duplicates.
        kept = pa.array(decision.keep)
        catalog_rows = pa.table(
            {
                "generation": pa.array(decision.generation, pa.int64()).filter(kept),
                "bucket": pa.array(decision.bucket, pa.int32()).filter(kept),
                "hash": table.column(KEY_HASH).filter(kept),
                "record_id": table.column(KEY_ID).filter(kept),
                "coords": coords_of(table, c.coordinate_columns).filter(kept),
                "batch_id": pa.array(np.full(int(decision.keep.sum()), batch_id, np.int64)),
            }
        )
        with ThreadPoolExecutor(1) as pool:
            appended = pool.submit(
                self.catalog.append_arrow, catalog_rows, self.catalog_app_id, batch_id
            )
            files = self._drop_rows(batch, staged, file_of_row, row_in_file, decision.keep)
            if not appended.result():
                log.info("%s batch %d: catalog already has it (replay)", self.sink_id, batch_id)
        DEDUP_DELTA.reached(2, batch_id)

        # 3. the output: one delta-rs commit with txn(sink id, batch id).
        commit_batch(self._committer(), batch_id, files)
        DEDUP_DELTA.reached(3, batch_id)

        # 4. the filters after this batch.
        self.state.save(batch_id, {b: f.to_bytes() for b, f in blooms.items()})
        shutil.rmtree(self.keys_path / f"b{batch_id:012d}", ignore_errors=True)
        DEDUP_DELTA.reached(4, batch_id)

        metrics = decision.metrics
        self.catalog.purge_outside(metrics.newest_generation, c.generations)
        self.metrics = self.metrics + metrics
        self.batches.append(metrics)
        log.info(
            "%s batch %s: %s rows, %s duplicates, lookups avoided %.1f%%, observed FP %.4f, "
            "state %s bytes",
            self.sink_id,
            batch_id,
            metrics.rows,
            metrics.batch_duplicates + metrics.catalog_duplicates,
            100 * metrics.lookups_avoided,
            metrics.observed_fp_rate,
            metrics.state_bytes,
        )

    # -- step 1 ----------------------------------------------------------------------------
    def _stage(self, batch: DataFrame, columns: list[str], batch_id: int) -> list[Staged]:
        c = self.config
        types = {f.name: f.dataType for f in batch.schema.fields}
        record_id = F.col(c.id_column).cast("string")
        extra = [F.xxhash64(record_id).alias(KEY_HASH)]
        # The id and event time travel once: as they are when they already are a string and
        # a timestamp (the event time's microseconds are read in the task), else converted.
        id_source, et_source = c.id_column, c.event_time_column
        if not isinstance(types[c.id_column], StringType):
            extra.append(record_id.alias(KEY_ID))
            id_source = KEY_ID
        if not isinstance(types[c.event_time_column], (TimestampType, TimestampNTZType)):
            extra.append(F.col(c.event_time_column).cast("timestamp").alias(KEY_ET))
            et_source = KEY_ET
        out_schema = batch.select(*columns).schema
        key_names = self._key_columns()
        keys_dir = str(self.keys_path / f"b{batch_id:012d}")
        stage = stager(
            self.output_path,
            self.sink_id,
            out_schema,
            batch_id,
            keys_dir,
            key_names,
            (id_source, et_source, *c.coordinate_columns),
        )
        source = batch.select(*[F.col(x) for x in dict.fromkeys([*columns, *key_names])], *extra)
        rows = source.mapInArrow(stage, MESSAGE_SCHEMA).collect()
        shape = schema_shape(out_schema.json())
        staged = [
            Staged(
                StagedFile(r["path"], r["size"], r["rows"], batch_id, r["partition"], shape),
                r["keys"],
                r["null_rows"],
            )
            for r in rows
        ]
        return sorted(staged, key=lambda s: s.file.partition)

    def _read_keys(self, staged: list[Staged]) -> tuple[pa.Table, np.ndarray, np.ndarray]:
        """The keys of every staged row, with the staged file (index) and row of each."""
        tables, files, rows = [], [], []
        for i, s in enumerate(staged):
            if not s.keys:
                continue
            with pa.memory_map(s.keys) as source:
                keys = pa.ipc.open_file(source).read_all()
            tables.append(keys)
            files.append(np.full(keys.num_rows, i, dtype=np.int64))
            rows.append(np.arange(keys.num_rows, dtype=np.int64))
        schema = pa.schema(
            [
                (KEY_HASH, pa.int64()),
                (KEY_ID, pa.string()),
                (KEY_ET, pa.int64()),
            ]
        )
        if not tables:
            empty = np.zeros(0, np.int64)
            coords = [(x, pa.string()) for x in self.config.coordinate_columns]
            return pa.schema([*schema, *coords]).empty_table(), empty, empty
        return pa.concat_tables(tables), np.concatenate(files), np.concatenate(rows)

    # -- between 1 and 3 -------------------------------------------------------------------
    def _drop_rows(
        self,
        batch: DataFrame,
        staged: list[Staged],
        file_of_row: np.ndarray,
        row_in_file: np.ndarray,
        keep: np.ndarray,
    ) -> list[StagedFile]:
        """Rewrite (in tasks) each staged file holding a dropped row, without those rows."""
        files = [s.file for s in staged]
        dropped = np.flatnonzero(~keep)
        if not len(dropped):
            return files
        work = []
        for i in np.unique(file_of_row[dropped]):
            rows = row_in_file[dropped[file_of_row[dropped] == i]]
            f = files[int(i)]
            work.append((int(i), f.path, f.rows, f.partition, f.batch_id, rows.tobytes()))
        path, sink_id = self.output_path, self.sink_id
        sc = batch.sparkSession.sparkContext
        rewritten = (
            sc.parallelize(work, len(work))
            .map(lambda w: (w[0], rewrite(path, sink_id, *w[1:])))
            .collect()
        )
        for i, (name, size, rows) in rewritten:
            old = files[i]
            files[i] = StagedFile(name, size, rows, old.batch_id, old.partition, old.schema_shape)
        return files

    def _quarantine_nulls(
        self, batch: DataFrame, batch_id: int, count: int, staged: list[Staged]
    ) -> None:
        keys = self._key_columns()
        if self.quarantine_path is None:
            self._committer().clean(batch_id, [s.file for s in staged], committed=False)
            raise DedupInputError(
                f"batch {batch_id}: {count} rows have a null in {keys}; give the sink a "
                "quarantine_path to keep them aside"
            )
        valid = F.lit(True)
        for k in keys:
            valid = valid & F.col(k).isNotNull()
        reason = F.concat(
            F.lit(REASON_NULL_KEY + ":"),
            F.concat_ws(",", *[F.when(F.col(k).isNull(), F.lit(k)) for k in keys]),
        )
        DeltaIdempotentWriter(self.quarantine_path, f"{self.sink_id}.quarantine")(
            batch.where(~valid).withColumn("_reason", reason), batch_id
        )
        log.warning("%s batch %d: %d rows quarantined (null key)", self.sink_id, batch_id, count)
