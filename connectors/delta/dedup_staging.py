"""The staged files of :class:`connectors.delta.dedup_sink.DeltaDedupSink` (docs/design.md,
"Dedup"): step 1 in the tasks (:func:`decider`), step 2 on the driver (:func:`commit_catalog`)."""

from __future__ import annotations

import json
import logging
import re
import struct
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.types import StructType

from connectors.delta.commit import commit_files
from connectors.delta.log import list_files, remove_unreferenced
from connectors.delta.staging import stage_batches, staged_name
from spark_ext.dedup.bucket import KEY_ET, KEY_HASH, KEY_ID, decide_batch
from spark_ext.dedup.catalog import CATALOG_SCHEMA, PARTITION_BY, DedupCatalog, catalog_app_id
from spark_ext.dedup.config import DedupConfig
from spark_ext.dedup.errors import BloomFormatError, DedupStateError
from spark_ext.dedup.state import BucketStateStore
from spark_ext.sinks.delta_txn import LatestTable, create_table
from spark_ext.sinks.owner import SinkOwner
from spark_ext.sinks.protocol import Protocol, Step, check_batch_order
from spark_ext.storage import Location, StorageSettings, filesystem

__all__ = [
    "DEDUP_DELTA",
    "MESSAGE_SCHEMA",
    "ROW_GROUP",
    "CatalogFile",
    "catalog_file_tag",
    "clean_catalog",
    "commit_catalog",
    "coords_of",
    "decider",
]

#: The steps of :class:`~connectors.delta.dedup_sink.DeltaDedupSink`; step 1 runs here.
DEDUP_DELTA = Protocol(
    "dedup_delta",
    (
        Step(1, "staged", "executor"),
        Step(2, "cataloged", "driver"),
        Step(3, "written", "driver"),
        Step(4, "cleaned", "driver"),
    ),
)

log = logging.getLogger(__name__)

#: Rows per row group of the staged Parquet files.
ROW_GROUP = 131_072

#: One row per bucket a task decided (``catalog``: JSON list of :class:`CatalogFile` fields).
MESSAGE_SCHEMA = (
    "bucket long, path string, size long, rows long, catalog string, null_rows long, metrics string"
)

#: A staged catalog file: ``generation=<g>/spark_ext-<sink id>-catalog-b<batch>-...parquet``.
_CATALOG_STAGED = re.compile(
    r"^generation=-?\d+/spark_ext-(?P<sink>.+)-b(?P<batch>\d+)-p\d+-a\d+-[0-9a-f]+\.parquet$"
)
#: Columns of a catalog data file (the partition column lives in the path).
_FILE_SCHEMA = pa.schema([f for f in CATALOG_SCHEMA if f.name not in PARTITION_BY])


@dataclass(frozen=True)
class CatalogFile:
    """One staged catalog file (``path`` relative to the catalog; ``stats``: Delta's)."""

    generation: int
    path: str
    size: int
    rows: int
    stats: str


def coords_of(table: pa.Table, columns: Sequence[str]) -> pa.Array:
    """The ``"/"``-joined coordinates of every row (the catalog's ``coords``)."""
    parts = [pc.cast(table.column(c), pa.string()) for c in columns]
    if len(parts) == 1:
        return parts[0].combine_chunks()
    return pc.binary_join_element_wise(*parts, "/").combine_chunks()


def _stats(rows: pa.Table) -> str:
    """Delta statistics of a catalog file: min/max of every column (docs/design.md, Dedup)."""
    cols = _FILE_SCHEMA.names
    lo = {c: pc.min(rows.column(c)).as_py() for c in cols}
    hi = {c: pc.max(rows.column(c)).as_py() for c in cols}
    nulls = dict.fromkeys(cols, 0)
    return json.dumps(
        {"numRecords": rows.num_rows, "minValues": lo, "maxValues": hi, "nullCount": nulls}
    )


def catalog_file_tag(sink_id: str) -> str:
    """The tag of ``sink_id``'s staged catalog files (no sink id has ``-``; a ``:`` in a
    relative path reads as a URI scheme to Delta)."""
    return f"{sink_id}-catalog"


def stage_catalog(
    catalog_path: str,
    tag: str,
    rows: pa.Table,
    batch_id: int,
    bucket: int,
    attempt: int,
    settings: StorageSettings | None = None,
) -> list[CatalogFile]:
    """Stage ``rows`` (:data:`~spark_ext.dedup.catalog.CATALOG_SCHEMA`) as one Parquet file per
    generation under ``catalog_path``; no Delta version references them yet."""
    import pyarrow.parquet as pq

    fs, root = filesystem(catalog_path, settings)
    local = not Location.parse(catalog_path).is_s3
    out = []
    generations = rows.column("generation").to_numpy()
    for gen in np.unique(generations):
        part = rows.filter(pa.array(generations == gen)).select(_FILE_SCHEMA.names)
        part = part.cast(_FILE_SCHEMA)
        name = f"generation={int(gen)}/" + staged_name(tag, batch_id, bucket, attempt)
        full = f"{root}/{name}"
        if local:  # object storage has no folders to make
            fs.create_dir(full.rsplit("/", 1)[0], recursive=True)
        pq.write_table(part, full, compression="snappy", row_group_size=ROW_GROUP, filesystem=fs)
        size = fs.get_file_info(full).size
        out.append(CatalogFile(int(gen), name, size, part.num_rows, _stats(part)))
    return out


def decider(
    config: DedupConfig,
    output_path: str,
    sink_id: str,
    schema: StructType,
    batch_id: int,
    state_root: str,
    key_sources: tuple[str, ...],
    owner: int | None = None,
    settings: StorageSettings | None = None,
) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """The ``mapInArrow`` function of step 1: decide each bucket of the task's rows, stage the
    kept rows and their catalog rows, save the bucket's filters; one message per bucket.
    ``key_sources``: the columns of the id (string), event time (timestamp) and coordinates;
    rows with a null key are left out and counted (the driver quarantines them); ``settings``:
    of the output and catalog on object storage (they reach the tasks with the function)."""
    out_names = schema.fieldNames()
    id_source, et_source, *coordinates = key_sources
    key_names = [config.id_column, config.event_time_column, *config.coordinate_columns]
    catalog_tag = catalog_file_tag(sink_id)

    def decide(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        from spark_ext.sinks.task import task_attempt

        _, attempt = task_attempt()
        chunks = [b for b in batches if b.num_rows]
        if not chunks:
            return
        table = pa.Table.from_batches(chunks).combine_chunks()
        valid = pc.is_valid(table.column(key_names[0]))
        for name in key_names[1:]:
            valid = pc.and_(valid, pc.is_valid(table.column(name)))
        valid_np = valid.to_numpy(zero_copy_only=False)
        hashes = table.column(KEY_HASH).to_numpy().view(np.uint64)
        buckets = (hashes % np.uint64(config.buckets)).astype(np.int64)
        store = BucketStateStore(state_root, settings=settings)
        catalog = DedupCatalog(config.catalog_path, settings)
        messages: list[dict[str, object]] = []
        for b in (int(x) for x in np.unique(buckets)):
            mine = buckets == b
            rows = table.filter(pa.array(mine & valid_np))
            bloom = config.new_bloom()
            version, data = store.load_before(b, batch_id)
            if data is not None:
                try:
                    bloom.load_bytes(data)
                except (BloomFormatError, struct.error) as exc:
                    raise DedupStateError(f"{state_root} v{version} bucket {b}: {exc}") from exc
            et = rows.column(et_source)
            keys = pa.table(
                {
                    KEY_HASH: rows.column(KEY_HASH),
                    KEY_ID: rows.column(id_source),
                    KEY_ET: pc.cast(pc.cast(et, pa.timestamp("us", et.type.tz)), pa.int64()),
                    **{c: rows.column(c) for c in coordinates},
                }
            )

            def lookup(h: np.ndarray, before: int, bucket: int = b) -> pa.Table:
                return catalog.lookup_hashes(h, before, bucket=bucket)

            decision = decide_batch(keys, config, {b: bloom}, lookup, batch_id)
            keep = pa.array(decision.keep)
            kept = rows.filter(keep).select(out_names)
            staged = stage_batches(
                kept.to_batches(max_chunksize=ROW_GROUP),
                output_path,
                sink_id,
                schema,
                batch_id,
                b,
                attempt,
                owner,
                settings,
            )
            catalog_rows = pa.table(
                {
                    "generation": pa.array(decision.generation, pa.int64()).filter(keep),
                    "bucket": pa.array(np.full(len(kept), b, np.int32)),
                    "hash": keys.column(KEY_HASH).filter(keep),
                    "record_id": keys.column(KEY_ID).filter(keep),
                    "coords": coords_of(keys, coordinates).filter(keep),
                    "batch_id": pa.array(np.full(len(kept), batch_id, np.int64)),
                }
            )
            files = stage_catalog(
                config.catalog_path, catalog_tag, catalog_rows, batch_id, b, attempt, settings
            )
            store.save(b, batch_id, bloom.to_bytes())
            messages.append(
                {
                    "bucket": b,
                    "path": staged.path,
                    "size": staged.size,
                    "rows": staged.rows,
                    "catalog": json.dumps([list(f.__dict__.values()) for f in files]),
                    "null_rows": int(mine.sum()) - rows.num_rows,
                    "metrics": decision.metrics.to_json(),
                }
            )
        # Every bucket of the task is staged and its filters after the batch are saved.
        DEDUP_DELTA.reached(1, batch_id)
        yield pa.RecordBatch.from_pylist(messages)

    return decide


def commit_catalog(
    catalog_path: str,
    sink_id: str,
    batch_id: int,
    files: list[CatalogFile],
    owner: SinkOwner | None = None,
    settings: StorageSettings | None = None,
) -> bool:
    """Step 2: one :func:`~connectors.delta.commit.commit_files` adds ``files`` with
    ``txn(<sink id>:catalog, batch_id)`` and the owner's; ``False`` for a replay, nothing for an
    empty batch, ``BatchRegressionError`` below the recorded batch."""
    app_id = catalog_app_id(sink_id)
    create_table(catalog_path, CATALOG_SCHEMA, settings, PARTITION_BY)
    adds = [(f.path, f.size, {"generation": str(f.generation)}, f.stats) for f in files]
    return commit_files(
        catalog_path,
        LatestTable(catalog_path, settings).get,
        sink_id,
        app_id,
        batch_id,
        adds,
        lambda table: check_batch_order(app_id, batch_id, table.transaction_version(app_id)),
        owner=owner,
        partition_by=PARTITION_BY,
        commit_empty=False,
        settings=settings,
    )


def clean_catalog(
    catalog_path: str,
    tag: str,
    batch_id: int | None = None,
    settings: StorageSettings | None = None,
) -> None:
    """Remove staged catalog files named by ``tag`` (:func:`catalog_file_tag`; of
    ``batch_id`` only, when given) that no snapshot of the catalog references."""
    import pyarrow.fs as pafs

    fs, root = filesystem(catalog_path, settings)
    staged = []
    for folder in fs.get_file_info(pafs.FileSelector(root, allow_not_found=True)):
        if folder.type != pafs.FileType.Directory or not folder.base_name.startswith("generation="):
            continue
        for info in list_files(fs, folder.path):
            match = _CATALOG_STAGED.match(f"{folder.base_name}/{info.base_name}")
            if match and match["sink"] == tag and batch_id in (None, int(match["batch"])):
                staged.append(match.string)
    remove_unreferenced(catalog_path, staged, settings)
