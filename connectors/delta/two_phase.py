"""Exactly-once Delta sink, two-phase: a Python stream writer stages, delta-rs commits (why and
which tables: docs/design.md, "Delta sinks"). Steps of :data:`~spark_ext.sinks.protocol.DELTA_TWO_PHASE`:

1. each task stages its partition as one Parquet file in the table folder
   (:func:`connectors.delta.staging.staged_name`), referenced by no snapshot;
2. the driver reads ``txn(sink id)``: equal is a replay, lower ``BatchRegressionError``, none
   next to files of the sink ``DeltaTxnExpiredError``;
3. one commit (:func:`connectors.delta.commit.commit_files`) adds the files with
   ``txn(sink id, batch)``, the run epoch and the owner, on a checked snapshot;
4. the batch's staged files of this owner the commit does not reference are deleted.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSource,
    DataSourceStreamArrowWriter,
    DataSourceStreamWriter,
    WriterCommitMessage,
)
from pyspark.sql.types import StructType

from connectors.delta.commit import StagedAdd, check_run, commit_files
from connectors.delta.log import delete_files, list_files, referenced_files, remove_unreferenced
from connectors.delta.staging import STAGED_NAME, StagedFile, owner_tag, stage_batches
from connectors.delta.table import schema_shape
from spark_ext.sinks.delta_txn import (
    LatestTable,
    Marks,
    check_writers,
    commit_marks,
    run_app_id,
)
from spark_ext.sinks.errors import (
    ConcurrentWriterError,
    DeltaTxnExpiredError,
    SchemaMismatchError,
    SinkConfigError,
    StagedDataMissingError,
)
from spark_ext.sinks.owner import OwnerDecision, SinkOwner
from spark_ext.sinks.protocol import (
    DELTA_TWO_PHASE,
    Protocol,
    TwoPhaseCommitter,
    abort_batch,
    commit_batch,
    validate_sink_id,
)
from spark_ext.sinks.task import current_batch_id, task_attempt
from spark_ext.storage import StorageSettings, filesystem

log = logging.getLogger(__name__)

__all__ = [
    "FORMAT",
    "DeltaCommitter",
    "DeltaStagingWriter",
    "DeltaTwoPhaseDataSource",
    "storage_options",
]

FORMAT = "spark_ext_delta_2pc"
#: The data source options that carry the table's :class:`StorageSettings` to the tasks (the
#: secret's name matches Spark's ``spark.redaction.regex``: redacted in plans and the UI).
_STORAGE_OPTION = "storage."


def storage_options(settings: StorageSettings | None) -> dict[str, str]:
    """``settings`` as options of :class:`DeltaTwoPhaseDataSource` (none for ``None``)."""
    return {f"{_STORAGE_OPTION}{k}": v for k, v in (asdict(settings) if settings else {}).items()}


def _settings_of(options: Any) -> StorageSettings | None:
    """The :class:`StorageSettings` that :func:`storage_options` put in ``options``."""
    values = {
        k[len(_STORAGE_OPTION) :]: v for k, v in options.items() if k.startswith(_STORAGE_OPTION)
    }
    return StorageSettings(**values) if values else None


@dataclass
class DeltaStagingWriter(DataSourceStreamArrowWriter):
    """Stages a task's rows as one Parquet file and commits all of a batch on the driver."""

    path: str
    sink_id: str
    schema: StructType
    run_epoch: int | None = None
    owner: SinkOwner | None = None
    settings: StorageSettings | None = None  # reaches the tasks with the writer (never logged)

    # 1. staged (executor)
    def write(self, iterator: Iterator[pa.RecordBatch]) -> StagedFile:
        partition, attempt = task_attempt()
        owner = self.owner.code if self.owner else None
        batch_id = current_batch_id()
        staged = stage_batches(
            iterator,
            self.path,
            self.sink_id,
            self.schema,
            batch_id,
            partition,
            attempt,
            owner,
            self.settings,
        )
        DELTA_TWO_PHASE.reached(1, staged.batch_id)
        return staged

    def commit(self, messages: Sequence[WriterCommitMessage | None], batchId: int) -> None:
        commit_batch(self.committer(), batchId, [m for m in messages if isinstance(m, StagedFile)])

    def abort(self, messages: Sequence[WriterCommitMessage | None], batchId: int) -> None:
        abort_batch(self.committer(), batchId, [m for m in messages if isinstance(m, StagedFile)])

    def committer(self) -> DeltaCommitter:
        return DeltaCommitter(
            self.path,
            self.sink_id,
            run_epoch=self.run_epoch,
            owner=self.owner,
            settings=self.settings,
        )


class DeltaCommitter(TwoPhaseCommitter[StagedFile]):
    """Driver side of the two-phase Delta sink: one delta-rs commit per batch (steps 2-4).

    ``max_conflicts``: lost races re-checked and retried before :class:`ConcurrentWriterError`;
    ``run_epoch``: the epoch this driver's start recorded (a newer one is
    :class:`DriverFencedError`); ``owner``: recorded by :meth:`recover`'s fence, re-checked by
    every commit (``None`` for either: unchecked); ``take_over``: at :meth:`recover`;
    ``settings``: of a table on object storage (docs/design.md, "Object storage").
    """

    protocol: Protocol = DELTA_TWO_PHASE

    def __init__(
        self,
        path: str,
        sink_id: str,
        max_conflicts: int = 5,
        run_epoch: int | None = None,
        *,
        owner: SinkOwner | None = None,
        take_over: bool = False,
        settings: StorageSettings | None = None,
    ) -> None:
        self.path = path
        self.sink_id = validate_sink_id(sink_id)
        self.max_conflicts = max_conflicts
        self.run_epoch = run_epoch
        self.owner = owner
        self.take_over = take_over
        self.settings = settings
        self._latest = LatestTable(path, settings)
        self._fs, self._root = filesystem(path, settings)

    @property
    def run_app_id(self) -> str:
        return run_app_id(self.sink_id)

    def _marks(self, table: Any) -> Marks:
        return Marks.of(table, self.sink_id, [self.sink_id])

    def _decide(self, table: Any) -> OwnerDecision | None:
        """The owner decision on ``table`` (raises for a stranger); ``None`` without an owner."""
        if self.owner is None:
            return None
        return self._marks(table).decide(self.path, self.owner, self.take_over)

    def _table(self) -> Any:
        """The newest snapshot (read incrementally: :class:`LatestTable`)."""
        table = self._latest.get()
        if table is None:
            from deltalake.exceptions import TableNotFoundError

            raise TableNotFoundError(f"no Delta table at {self.path}")
        return table

    def last_committed_batch(self) -> int | None:
        """The recorded batch, or ``None`` for a sink that never committed to the table
        (:class:`DeltaTxnExpiredError`: no ``txn`` but files of this sink in the log)."""
        version: int | None = self._table().transaction_version(self.sink_id)
        if version is None:
            referenced = referenced_files(self.path, self.settings)
            committed = [
                n for n in referenced if (m := STAGED_NAME.match(n)) and m["sink"] == self.sink_id
            ]
            if committed:
                raise DeltaTxnExpiredError(self.path, self.sink_id, len(committed))
        return version

    def commit_staged(self, batch_id: int, messages: Sequence[StagedFile]) -> None:
        """Step 3 through :func:`connectors.delta.commit.commit_files`, checked on every
        snapshot it commits against (epoch, owner, features, schema, staged files there)."""
        adds: list[StagedAdd] = [
            (m.path, m.size, {}, json.dumps({"numRecords": m.rows})) for m in messages if m.path
        ]
        run = (self.run_app_id, self.run_epoch) if self.run_epoch is not None else None

        def check(table: Any) -> bool:
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
            # Checked after the snapshot read: a newer start fences before it deletes.
            missing = [m.path for m in messages if m.path and not self._exists(m.path)]
            if missing:
                check_run(self._table(), self.path, self.sink_id, run)
                raise StagedDataMissingError(f"{self.path}: {missing} of batch {batch_id} gone")
            return False

        commit_files(
            self.path,
            self._table,
            self.sink_id,
            self.sink_id,
            batch_id,
            adds,
            check,
            owner=self.owner,
            run=run,
            # The table as it is now, not as it was at start (N3-N5 of issue #24).
            rows_json=next((m.schema_json for m in messages if m.path and m.schema_json), None),
            max_conflicts=self.max_conflicts,
            settings=self.settings,
        )
        rows = sum(m.rows for m in messages)
        log.info(
            "%s batch %d: committed %d files, %d rows", self.sink_id, batch_id, len(adds), rows
        )

    def _exists(self, name: str) -> bool:
        return bool(self._fs.get_file_info(f"{self._root}/{name}").is_file)

    def _names(self) -> list[str]:
        """Names of the files directly in the table folder."""
        return [i.base_name for i in list_files(self._fs, self._root)]

    def staged_files(self) -> list[tuple[str, int]]:
        """``(file name, batch id)`` of every file this sink staged in the table folder."""
        prefix = f"spark_ext-{self.sink_id}-"
        out = []
        for name in self._names():
            if not name.startswith(prefix):
                continue
            match = STAGED_NAME.match(name)
            if match and match["sink"] == self.sink_id:
                out.append((name, int(match["batch"])))
        return out

    def _owned_attempts(self, batch_id: int) -> set[str]:
        """Names of every attempt of ``batch_id`` staged under this committer's owner: a
        prefix test per name, no parse (the clean-up after each commit lists the folder)."""
        owner = self.owner.code if self.owner else None
        prefix = f"spark_ext-{self.sink_id}{owner_tag(owner)}-b{batch_id:012d}-"
        return {n for n in self._names() if n.startswith(prefix)}

    def clean(self, batch_id: int, messages: Sequence[StagedFile], committed: bool) -> None:
        named = {m.path for m in messages if m.path}
        if committed:
            # only this commit added files of this owner's batch (docs/design.md, deletion rule)
            delete_files(self._fs, self._root, sorted(self._owned_attempts(batch_id) - named))
        else:
            # abort or skipped replay: keep every file a loadable snapshot references
            ours = {n for n, b in self.staged_files() if b == batch_id}
            remove_unreferenced(self.path, named | ours, self.settings)

    def recover(self, fence: bool = False) -> None:
        """At start: check the owner and the ``txn`` (before anything is touched), with
        ``fence`` record a new run epoch and the owner in one commit, delete staged files no
        snapshot references."""
        table = self._table()
        self._decide(table)
        check_writers(table, self.path, spark_writes=False)
        self.last_committed_batch()
        if fence:
            self.run_epoch = self._fence()
        doomed = remove_unreferenced(self.path, [n for n, _ in self.staged_files()], self.settings)
        if doomed:
            log.warning("%s: removed %d unreferenced staged files", self.sink_id, len(doomed))

    def _fence(self) -> int:
        """Record ``epoch + 1`` as this sink's run epoch, with the owner, in one commit."""
        from deltalake.exceptions import CommitFailedError

        for _ in range(self.max_conflicts + 1):
            table = self._table()
            epoch = (table.transaction_version(self.run_app_id) or 0) + 1
            run = (self.run_app_id, epoch)
            try:
                commit_marks(table, self._marks(table), self.owner, self._decide(table), run)
            except CommitFailedError:
                continue
            log.info("%s: run %d fences older drivers of this sink", self.sink_id, epoch)
            return epoch
        raise ConcurrentWriterError(f"{self.path}: could not record a run of {self.sink_id!r}")


class DeltaTwoPhaseDataSource(DataSource):
    """Python data source ``spark_ext_delta_2pc``: options ``path``, ``sink_id``, ``run_epoch``,
    ``owner`` (the last two as :meth:`DeltaCommitter.recover` recorded them; without them
    commits are not fenced nor owner-checked), and :func:`storage_options` for a table on
    object storage."""

    @classmethod
    def name(cls) -> str:
        return FORMAT

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        path = self.options.get("path")
        if not path:
            raise SinkConfigError("path", "the Delta table path is required")
        if overwrite:
            raise SinkConfigError(
                "outputMode", "complete mode (overwrite) is not supported: the sink appends"
            )
        sink_id = validate_sink_id(self.options.get("sink_id", ""))
        epoch = self.options.get("run_epoch")
        owner = self.options.get("owner")
        return DeltaStagingWriter(
            path,
            sink_id,
            schema,
            int(epoch) if epoch else None,
            SinkOwner(owner) if owner else None,
            _settings_of(self.options),
        )
