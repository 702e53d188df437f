"""Step 1 of the two-phase Delta sink (and ``DeltaDedupSink``), in the task: rows staged as one
Parquet file in the table folder (:data:`STAGED_NAME`), unreferenced until the driver commits it."""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterable
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.parquet as pq
from pyspark.sql.datasource import WriterCommitMessage
from pyspark.sql.types import StructType

from connectors.delta.table import arrow_schema, schema_shape
from spark_ext import storage
from spark_ext.storage import StorageSettings

__all__ = ["STAGED_NAME", "StagedFile", "owner_tag", "stage_batches", "staged_name"]

STAGED_NAME = re.compile(
    r"^spark_ext-(?P<sink>.+?)(?:-o(?P<owner>[0-9a-f]{16}))?"
    r"-b(?P<batch>\d+)-p(?P<part>\d+)-a(?P<attempt>\d+)-[0-9a-f]+\.parquet$"
)


@dataclass(frozen=True)
class StagedFile(WriterCommitMessage):
    """Commit message of one task: the Parquet file it staged in the table folder."""

    path: str  # relative to the table root; "" when the partition had no rows
    size: int
    rows: int
    batch_id: int
    partition: int
    schema_shape: str
    schema_json: str = ""  # the rows' schema with nullability (NOT NULL checks); "": unknown


def owner_tag(owner: int | None) -> str:
    """The owner part of a staged name: ``o`` + the owner's code in 16 hex digits."""
    return "" if owner is None else f"-o{owner:016x}"


def staged_name(
    sink_id: str, batch_id: int, partition: int, attempt: int, owner: int | None = None
) -> str:
    """A new, unique staged-file name for one task attempt of ``owner`` (:data:`STAGED_NAME`;
    why the owner: docs/design.md, "Delta sinks", take-over)."""
    return (
        f"spark_ext-{sink_id}{owner_tag(owner)}-b{batch_id:012d}-p{partition:05d}-a{attempt}-"
        f"{uuid.uuid4().hex[:12]}.parquet"
    )


def stage_batches(
    batches: Iterable[pa.RecordBatch],
    path: str,
    sink_id: str,
    schema: StructType,
    batch_id: int,
    partition: int,
    attempt: int,
    owner: int | None = None,
    settings: StorageSettings | None = None,
) -> StagedFile:
    """Step 1 for one task: write ``batches`` as one Parquet file in the table folder (local or
    object storage: ``settings``; an empty partition stages nothing: ``path`` is ``""``)."""
    target = arrow_schema(schema)
    name = staged_name(sink_id, batch_id, partition, attempt, owner)
    fs, root = storage.filesystem(path, settings)
    full = f"{root}/{name}"
    rows = 0
    with pq.ParquetWriter(full, target, compression="snappy", filesystem=fs) as out:
        for batch in batches:
            if batch.num_rows:
                out.write_batch(batch.cast(target) if batch.schema != target else batch)
                rows += batch.num_rows
    size = fs.get_file_info(full).size
    if rows == 0:
        fs.delete_file(full)
        name, size = "", 0
    rows_json = schema.json()
    return StagedFile(name, size, rows, batch_id, partition, schema_shape(rows_json), rows_json)
