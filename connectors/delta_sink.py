"""Exactly-once Delta sinks: two-phase (Python stream writer + delta-rs) and idempotent.

Two-phase (:class:`DeltaTwoPhaseDataSource`, format ``spark_ext_delta_2pc``), steps as in
:mod:`spark_ext.sinks.protocol`:

1. each task writes its partition as one Parquet file *inside the table folder*, named
   ``spark_ext-<sink id>-b<batch>-p<partition>-a<attempt>-<uuid>.parquet``; no Delta snapshot
   references it, so no reader sees it. The commit message names the file, its size, rows
   and the schema it was written with.
2. the driver's ``commit(messages, batchId)`` reads ``txn(appId=sink id)`` of the table; a
   recorded version ``>= batchId`` means a replay: nothing is committed.
3. one delta-rs commit adds every staged file and ``txn(sink id, batchId)``. It is made
   against the snapshot read in step 2 with no silent retry: if another commit landed in
   between, the sink re-reads the snapshot and re-checks the ``txn`` before trying again.
4. staged files of the batch that the commit does not reference are deleted.

``abort`` deletes the batch's staged files; :meth:`DeltaCommitter.recover` (run when the query
starts) deletes staged files of batches above the recorded version (a killed driver's).

Idempotent (:class:`DeltaIdempotentWriter`, for ``foreachBatch``): Spark's own Delta writer
with ``txnAppId`` = sink id and ``txnVersion`` = batch id, so Delta skips a batch it already
has; the schema is checked before the write.

Both sinks are append-only, write local (or mounted) paths, and do not collect statistics
beyond ``numRecords``.
"""

from __future__ import annotations

import json
import logging
import os
import re
import time
import uuid
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from pyspark.sql import DataFrame
from pyspark.sql.datasource import (
    DataSource,
    DataSourceStreamArrowWriter,
    DataSourceStreamWriter,
    WriterCommitMessage,
)
from pyspark.sql.types import StructType

from spark_ext.sinks.errors import (
    ConcurrentWriterError,
    SchemaMismatchError,
    SinkConfigError,
    StagedDataMissingError,
)
from spark_ext.sinks.protocol import (
    DELTA_IDEMPOTENT,
    DELTA_TWO_PHASE,
    Protocol,
    TwoPhaseCommitter,
    abort_batch,
    commit_batch,
    validate_sink_id,
)

log = logging.getLogger(__name__)

FORMAT = "spark_ext_delta_2pc"
#: Local property Spark's micro-batch engine sets on every job of a batch.
BATCH_ID_PROPERTY = "streaming.sql.batchId"
STAGED_NAME = re.compile(
    r"^spark_ext-(?P<sink>.+)-b(?P<batch>\d+)-p(?P<part>\d+)-a(?P<attempt>\d+)-[0-9a-f]+\.parquet$"
)


# -- schema ------------------------------------------------------------------------------
def _shape(node: Any) -> Any:
    """A schema JSON tree without nullability and metadata (what an append must match)."""
    if isinstance(node, dict):
        return {
            k: _shape(v)
            for k, v in node.items()
            if k not in {"nullable", "containsNull", "valueContainsNull", "metadata"}
        }
    if isinstance(node, list):
        return [_shape(v) for v in node]
    return node


def schema_shape(schema_json: str) -> str:
    """Canonical text of a Spark/Delta schema JSON, ignoring nullability and metadata.

    Spark's ``StructType.json()`` and Delta's schema JSON use the same format, so the shapes
    of the rows and of the table compare as strings.
    """
    return json.dumps(_shape(json.loads(schema_json)), sort_keys=True)


def arrow_schema(schema: StructType) -> pa.Schema:
    """The Arrow schema staged files are written with (timestamps in UTC, like the session)."""
    from pyspark.sql.pandas.types import to_arrow_schema

    return to_arrow_schema(schema, timezone="UTC")


def check_table_schema(path: str | Path, schema: StructType) -> None:
    """Raise :class:`SchemaMismatchError` if the Delta table at ``path`` cannot take ``schema``.

    A missing table is fine (it is created with ``schema``).
    """
    from deltalake import DeltaTable
    from deltalake.exceptions import TableNotFoundError

    try:
        table = DeltaTable(str(path))
    except TableNotFoundError:
        return
    expected = schema_shape(table.schema().to_json())
    actual = schema_shape(schema.json())
    if expected != actual:
        raise SchemaMismatchError(str(path), table.schema().to_json(), schema.json())


def ensure_table(path: str | Path, schema: StructType) -> None:
    """Create an empty Delta table with ``schema`` at ``path`` unless one exists (and fits)."""
    from deltalake import DeltaTable

    check_table_schema(path, schema)
    Path(path).mkdir(parents=True, exist_ok=True)
    DeltaTable.create(str(path), schema=arrow_schema(schema), mode="ignore")


# -- step 1: staging on executors --------------------------------------------------------
@dataclass(frozen=True)
class StagedFile(WriterCommitMessage):
    """Commit message of one task: the Parquet file it staged in the table folder."""

    path: str  # relative to the table root; "" when the partition had no rows
    size: int
    rows: int
    batch_id: int
    partition: int
    schema_shape: str


def current_batch_id() -> int:
    """The micro-batch id of the running task (a local property Spark sets per batch)."""
    from pyspark import TaskContext

    ctx = TaskContext.get()
    value = ctx.getLocalProperty(BATCH_ID_PROPERTY) if ctx else None
    if value is None:
        raise StagedDataMissingError(f"no {BATCH_ID_PROPERTY} local property: not a stream task")
    return int(value)


def staged_name(sink_id: str, batch_id: int, partition: int, attempt: int) -> str:
    return (
        f"spark_ext-{sink_id}-b{batch_id:012d}-p{partition:05d}-a{attempt}-"
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
) -> StagedFile:
    """Step 1 for one task: write ``batches`` as one Parquet file in the table folder.

    No Delta snapshot references the file until the driver commits it. An empty partition
    stages nothing (the message's ``path`` is ``""``).
    """
    target = arrow_schema(schema)
    name = staged_name(sink_id, batch_id, partition, attempt)
    full = os.path.join(path, name)
    rows = 0
    with pq.ParquetWriter(full, target, compression="snappy") as out:
        for batch in batches:
            if batch.num_rows:
                out.write_batch(batch.cast(target) if batch.schema != target else batch)
                rows += batch.num_rows
    size = os.path.getsize(full)
    if rows == 0:
        os.remove(full)
        name, size = "", 0
    return StagedFile(name, size, rows, batch_id, partition, schema_shape(schema.json()))


class DeltaStagingWriter(DataSourceStreamArrowWriter):
    """Stages a task's rows as one Parquet file and commits all of a batch on the driver."""

    def __init__(self, path: str, sink_id: str, schema: StructType) -> None:
        self.path = path
        self.sink_id = sink_id
        self.schema = schema

    # 1. staged (executor)
    def write(self, iterator: Iterator[pa.RecordBatch]) -> StagedFile:
        from pyspark import TaskContext

        ctx = TaskContext.get()
        partition = ctx.partitionId() if ctx else 0
        attempt = ctx.attemptNumber() if ctx else 0
        staged = stage_batches(
            iterator, self.path, self.sink_id, self.schema, current_batch_id(), partition, attempt
        )
        DELTA_TWO_PHASE.reached(1, staged.batch_id)
        return staged

    def commit(self, messages: Sequence[WriterCommitMessage | None], batchId: int) -> None:
        commit_batch(self.committer(), batchId, _staged(messages))

    def abort(self, messages: Sequence[WriterCommitMessage | None], batchId: int) -> None:
        abort_batch(self.committer(), batchId, _staged(messages))

    def committer(self) -> DeltaCommitter:
        return DeltaCommitter(self.path, self.sink_id)


def _staged(messages: Sequence[WriterCommitMessage | None]) -> list[StagedFile]:
    return [m for m in messages if isinstance(m, StagedFile)]


# -- steps 2-4: the driver ---------------------------------------------------------------
class DeltaCommitter(TwoPhaseCommitter[StagedFile]):
    """Driver side of the two-phase Delta sink: one delta-rs commit per batch.

    Parameters
    ----------
    path
        The Delta table folder (it exists: :func:`ensure_table` made it).
    sink_id
        Recorded as ``txn.appId``; the batch id is ``txn.version``.
    max_conflicts
        How many times a commit that lost a race against another writer is re-checked and
        retried before :class:`ConcurrentWriterError`.
    """

    protocol: Protocol = DELTA_TWO_PHASE

    def __init__(self, path: str, sink_id: str, max_conflicts: int = 5) -> None:
        self.path = path
        self.sink_id = validate_sink_id(sink_id)
        self.max_conflicts = max_conflicts

    def _table(self) -> Any:
        from deltalake import DeltaTable

        return DeltaTable(self.path)

    def last_committed_batch(self) -> int | None:
        version: int | None = self._table().transaction_version(self.sink_id)
        return version

    def commit_staged(self, batch_id: int, messages: Sequence[StagedFile]) -> None:
        from deltalake import CommitProperties, Transaction
        from deltalake.exceptions import CommitFailedError
        from deltalake.transaction import AddAction

        now_ms = int(time.time() * 1000)
        adds = []
        for m in messages:
            if not m.path:
                continue
            if not os.path.exists(os.path.join(self.path, m.path)):
                raise StagedDataMissingError(f"{self.path}/{m.path} of batch {batch_id} is gone")
            adds.append(
                AddAction(m.path, m.size, {}, now_ms, True, json.dumps({"numRecords": m.rows}))
            )
        for attempt in range(self.max_conflicts + 1):
            table = self._table()  # the snapshot the commit is made against
            recorded = table.transaction_version(self.sink_id)
            if recorded is not None and recorded >= batch_id:
                raise ConcurrentWriterError(
                    f"{self.path}: another writer with sink id {self.sink_id!r} recorded batch "
                    f"{recorded} while this one was committing batch {batch_id}"
                )
            expected = schema_shape(table.schema().to_json())
            for m in messages:
                if m.schema_shape != expected:
                    raise SchemaMismatchError(self.path, table.schema().to_json(), m.schema_shape)
            try:
                table.create_write_transaction(
                    adds,
                    mode="append",
                    schema=table.schema(),
                    commit_properties=CommitProperties(
                        custom_metadata={
                            "spark_ext.sink_id": self.sink_id,
                            "spark_ext.batch_id": batch_id,
                        },
                        max_commit_retries=0,
                        app_transactions=[Transaction(self.sink_id, batch_id, now_ms)],
                    ),
                )
            except CommitFailedError as exc:
                log.warning(
                    "%s batch %d: commit lost a race (%s), re-checking (%d)",
                    self.sink_id,
                    batch_id,
                    exc,
                    attempt + 1,
                )
                continue
            rows = sum(m.rows for m in messages)
            log.info(
                "%s batch %d: committed %d files, %d rows", self.sink_id, batch_id, len(adds), rows
            )
            return
        raise ConcurrentWriterError(
            f"{self.path}: batch {batch_id} lost {self.max_conflicts + 1} commit races in a row"
        )

    def staged_files(self) -> list[tuple[str, int]]:
        """``(file name, batch id)`` of every file this sink staged in the table folder."""
        out = []
        for name in os.listdir(self.path):
            match = STAGED_NAME.match(name)
            if match and match["sink"] == self.sink_id:
                out.append((name, int(match["batch"])))
        return out

    def clean(self, batch_id: int, messages: Sequence[StagedFile], committed: bool) -> None:
        named = {m.path for m in messages if m.path}
        if committed:
            # Losing task attempts of this batch: staged, never referenced.
            doomed = [n for n, b in self.staged_files() if b == batch_id and n not in named]
        else:
            doomed = sorted(named)
            last = self.last_committed_batch()
            others = [n for n, b in self.staged_files() if b == batch_id and n not in named]
            if last is None or last < batch_id:  # nothing of this batch is committed
                doomed += others
            elif others:
                # An earlier attempt committed the batch and was killed before its step 4:
                # what its commit does not reference will never be referenced.
                referenced = {f.rsplit("/", 1)[-1] for f in self._table().file_uris()}
                doomed += [n for n in others if n not in referenced]
        self._remove(doomed)

    def recover(self) -> None:
        last = self.last_committed_batch()
        doomed = [n for n, b in self.staged_files() if last is None or b > last]
        if doomed:
            log.warning("%s: removing %d orphaned staged files", self.sink_id, len(doomed))
        self._remove(doomed)

    def _remove(self, names: Sequence[str]) -> None:
        for name in names:
            try:
                os.remove(os.path.join(self.path, name))
            except FileNotFoundError:
                pass


class DeltaTwoPhaseDataSource(DataSource):
    """Python data source ``spark_ext_delta_2pc``: options ``path`` and ``sink_id``."""

    @classmethod
    def name(cls) -> str:
        return FORMAT

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        path = self.options.get("path")
        if not path:
            raise SinkConfigError("path", "the Delta table path is required")
        sink_id = validate_sink_id(self.options.get("sink_id", ""))
        return DeltaStagingWriter(path, sink_id, schema)


# -- idempotent, foreachBatch ------------------------------------------------------------
class DeltaIdempotentWriter:
    """``foreachBatch`` function: append with ``txnAppId`` = sink id, ``txnVersion`` = batch id.

    Parameters
    ----------
    path
        The Delta table folder.
    sink_id
        Delta's ``txnAppId``; Delta skips a write whose ``txnVersion`` is not above the
        version recorded for it, so a replayed batch adds nothing.
    max_conflicts
        Retries of a write that lost a race to another writer's commit. Safe here because the
        retry carries the same ``txnVersion`` (Delta skips it if the batch did land).
    """

    protocol: Protocol = DELTA_IDEMPOTENT

    def __init__(self, path: str, sink_id: str, max_conflicts: int = 3) -> None:
        self.path = path
        self.sink_id = validate_sink_id(sink_id)
        self.max_conflicts = max_conflicts

    def __call__(self, df: DataFrame, batch_id: int) -> None:
        from delta.exceptions import (
            ConcurrentAppendException,
            ConcurrentTransactionException,
            DeltaConcurrentModificationException,
        )

        check_table_schema(self.path, df.schema)
        # 1. before_write: Delta's txn check below skips a batch already recorded.
        self.protocol.reached(1, batch_id)
        for attempt in range(self.max_conflicts + 1):
            try:
                (
                    df.write.format("delta")
                    .mode("append")
                    .option("txnAppId", self.sink_id)
                    .option("txnVersion", str(batch_id))
                    .save(self.path)
                )
                break
            except ConcurrentTransactionException as exc:
                raise ConcurrentWriterError(
                    f"{self.path}: another query writes with sink id {self.sink_id!r}"
                ) from exc
            except (ConcurrentAppendException, DeltaConcurrentModificationException) as exc:
                log.warning(
                    "%s batch %d: conflict %s, retry %d", self.sink_id, batch_id, exc, attempt
                )
        else:
            raise ConcurrentWriterError(f"{self.path}: batch {batch_id} kept conflicting")
        # 3. written (and marked: the txn action is part of the same Delta commit).
        self.protocol.reached(3, batch_id)
