"""The executor side of :class:`connectors.dedup_delta_sink.DeltaDedupSink`: what its tasks run.

Step 1 (``_stager``, in ``mapInArrow``): each task stages its rows as one Parquet file in the
output table's folder and their keys as an Arrow file; the commit message names both. Between
steps 1 and 3 (``_rewrite``, one task per file): a staged file holding a dropped row is
rewritten without it. The driver side, and the steps, are in :mod:`connectors.dedup_delta_sink`.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.types import LongType, StringType, StructField, StructType

from connectors.delta_sink import StagedFile, stage_batches, staged_name
from spark_ext.dedup.batch import KEY_ET, KEY_HASH, KEY_ID

__all__ = ["MESSAGE_SCHEMA", "ROW_GROUP", "Staged", "coords_of", "rewrite", "stager"]

#: Rows per row group of the staged Parquet files.
ROW_GROUP = 131_072

MESSAGE_SCHEMA = StructType(
    [
        StructField("path", StringType()),
        StructField("size", LongType()),
        StructField("rows", LongType()),
        StructField("partition", LongType()),
        StructField("keys", StringType()),
        StructField("null_rows", LongType()),
    ]
)


@dataclass(frozen=True)
class Staged:
    """What one task of step 1 staged: the output file and the file of its rows' keys."""

    file: StagedFile
    keys: str  # Arrow IPC file of the keys, row for row; "" when the task had no rows
    null_rows: int


def coords_of(table: pa.Table, columns: Sequence[str]) -> pa.Array:
    """The ``"/"``-joined coordinates of every row (the catalog's ``coords``)."""
    parts = [pc.cast(table.column(c), pa.string()) for c in columns]
    if len(parts) == 1:
        return parts[0].combine_chunks()
    return pc.binary_join_element_wise(*parts, "/").combine_chunks()


def stager(
    path: str,
    sink_id: str,
    schema: StructType,
    batch_id: int,
    keys_dir: str,
    key_names: list[str],
    key_sources: tuple[str, ...],
) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """The ``mapInArrow`` function of step 1: stage the task's rows (output columns) as a
    Parquet file in the table folder and their keys as an Arrow file in ``keys_dir``; yield
    the commit message. Rows with a null key are left out and counted.

    ``key_sources`` name the columns holding the id (a string), the event time (a timestamp)
    and the coordinates; the keys file has them as ``_dedup_id``, ``_dedup_et_us`` (int64
    microseconds) and the coordinate names, after ``_dedup_hash``.
    """
    out_names = schema.fieldNames()
    id_source, et_source, *coordinates = key_sources
    key_file_names = [KEY_HASH, KEY_ID, KEY_ET, *coordinates]

    def stage(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        from pyspark import TaskContext

        ctx = TaskContext.get()
        partition = ctx.partitionId() if ctx else 0
        attempt = ctx.attemptNumber() if ctx else 0
        os.makedirs(keys_dir, exist_ok=True)
        keys_file = os.path.join(keys_dir, f"p{partition:05d}-a{attempt}.arrow")
        nulls = 0
        writer: pa.ipc.RecordBatchFileWriter | None = None

        def rows() -> Iterator[pa.RecordBatch]:
            """The output columns of the valid rows, in row groups of about ROW_GROUP rows."""
            nonlocal nulls, writer
            pending: list[pa.RecordBatch] = []
            pending_rows = 0
            for b in batches:
                if not b.num_rows:
                    continue
                if any(b.column(name).null_count for name in key_names):
                    valid = pc.is_valid(b.column(key_names[0]))
                    for name in key_names[1:]:
                        valid = pc.and_(valid, pc.is_valid(b.column(name)))
                    before = b.num_rows
                    b = b.filter(valid)
                    nulls += before - b.num_rows
                et = b.column(et_source)
                keys = pa.RecordBatch.from_arrays(
                    [
                        b.column(KEY_HASH),
                        b.column(id_source),
                        pc.cast(pc.cast(et, pa.timestamp("us", et.type.tz)), pa.int64()),
                        *[b.column(n) for n in coordinates],
                    ],
                    names=key_file_names,
                )
                if writer is None:
                    writer = pa.ipc.new_file(keys_file, keys.schema)
                writer.write_batch(keys)
                pending.append(
                    pa.RecordBatch.from_arrays([b.column(n) for n in out_names], names=out_names)
                )
                pending_rows += b.num_rows
                if pending_rows >= ROW_GROUP:
                    yield from pa.Table.from_batches(pending).combine_chunks().to_batches()
                    pending, pending_rows = [], 0
            if pending:
                yield from pa.Table.from_batches(pending).combine_chunks().to_batches()

        staged = stage_batches(rows(), path, sink_id, schema, batch_id, partition, attempt)
        if writer is not None:
            writer.close()
        yield pa.RecordBatch.from_pydict(
            {
                "path": [staged.path],
                "size": [staged.size],
                "rows": [staged.rows],
                "partition": [partition],
                "keys": [keys_file if writer is not None else ""],
                "null_rows": [nulls],
            }
        )

    return stage


def rewrite(
    path: str, sink_id: str, name: str, rows: int, partition: int, batch_id: int, drop: bytes
) -> tuple[str, int, int]:
    """A staged file without the rows at ``drop`` (int64 positions): a new staged file."""
    import pyarrow.parquet as pq

    table = pq.read_table(os.path.join(path, name))
    mask = np.ones(rows, dtype=bool)
    mask[np.frombuffer(drop, dtype=np.int64)] = False
    kept = table.filter(pa.array(mask))
    if kept.num_rows == 0:
        return "", 0, 0
    new = staged_name(sink_id, batch_id, partition, 0)
    full = os.path.join(path, new)
    pq.write_table(kept, full, compression="snappy")
    return new, os.path.getsize(full), kept.num_rows
