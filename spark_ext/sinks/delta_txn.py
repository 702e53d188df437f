"""Delta tables a sink marks: batch marker, owner, and the one ``txnAppId`` appender.

App ids, the owner property and why this lives in the core: docs/design.md, "Delta sinks", marks.

>>> owner_app_id("events"), run_app_id("events"), owner_property("events")
('events:owner', 'events:run', 'spark_ext.owner:events')
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from spark_ext.sinks.errors import (
    ConcurrentWriterError,
    DeltaTargetPathError,
    DeltaTxnExpiredError,
    MixedDeltaWritersError,
    SinkOwnerError,
)
from spark_ext.sinks.names import derived_name
from spark_ext.sinks.owner import OwnerDecision, SinkOwner, check_owner
from spark_ext.sinks.protocol import check_batch_order, validate_sink_id
from spark_ext.storage import Location, StorageSettings, spark_uri

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import DataFrame
    from pyspark.sql.types import StructType

__all__ = [
    "NO_BATCH",
    "DeltaTxnAppender",
    "LatestTable",
    "Marks",
    "arrow_schema",
    "check_target_path",
    "check_writers",
    "commit_marks",
    "create_table",
    "marker_app_id",
    "owner_app_id",
    "owner_property",
    "run_app_id",
    "user_metadata",
]

log = logging.getLogger(__name__)

#: The batch marker of a sink that has an owner but no batch yet (Spark writes any batch id
#: above it, delta-rs accepts it): what an owner's first record and a take-over write.
NO_BATCH = -1
#: Namespace of the table property that names a sink's owner.
OWNER_PROPERTY = "spark_ext.owner"


def owner_app_id(sink_id: str) -> str:
    """``txn.appId`` of the owner of ``sink_id`` (version: the owner's code)."""
    return derived_name(sink_id, "owner")


def run_app_id(sink_id: str) -> str:
    """``txn.appId`` of a two-phase sink's run epoch."""
    return derived_name(sink_id, "run")


def marker_app_id(sink_id: str, kind: str) -> str:
    """``txn.appId`` of the batch marker of ``sink_id``'s ``kind`` of table (``catalog``,
    ``late``, ``quarantine``); the output's marker is the sink id itself."""
    return derived_name(sink_id, kind)


def owner_property(sink_id: str) -> str:
    """The table property naming the owner (query id) of ``sink_id``."""
    return derived_name(OWNER_PROPERTY, sink_id)


def user_metadata(app_id: str) -> str:
    """The ``userMetadata`` of every Spark commit of the batch marker ``app_id``."""
    return f"spark_ext.sink_id={app_id}"


def arrow_schema(schema: StructType) -> pa.Schema:
    """The Arrow schema of Spark rows (timestamps in UTC, like the session)."""
    from pyspark.sql.pandas.types import to_arrow_schema

    return to_arrow_schema(schema, timezone="UTC")


def check_target_path(
    path: str | os.PathLike[str], settings: StorageSettings | None = None
) -> None:
    """Raise :class:`DeltaTargetPathError` unless ``path`` is a Delta table, missing or an
    empty folder (docs/design.md, "Delta sinks", target path); on object storage, a missing
    bucket, refused credentials or a silent endpoint first raise :func:`storage.check`'s
    typed errors."""
    from spark_ext import storage

    loc = Location.parse(os.fspath(path))
    if storage.exists(loc.join("_delta_log"), settings):
        return
    storage.check(loc, settings)
    if not storage.exists(loc, settings):
        return
    if storage.is_file(loc, settings):
        raise DeltaTargetPathError(str(path), "is a file, not a Delta table folder")
    files = storage.list_prefix(loc, settings)
    if files:
        raise DeltaTargetPathError(
            str(path), f"holds {len(files)} file(s) ({files[0]}, ...) but no _delta_log"
        )


#: The two kinds of Delta writer on object storage (docs/design.md, "Object storage").
SPARK_WRITER = "Spark's Delta writer (S3SingleDriverLogStore, no lock across processes)"
DELTA_RS_WRITER = "a delta-rs writer (conditional put)"


def check_writers(table: Any, path: str, spark_writes: bool) -> None:
    """On object storage, :class:`MixedDeltaWritersError` if ``table``'s log holds a commit of
    the other kind of writer than ours (``spark_writes``: Spark's Delta, else delta-rs; our own
    delta-rs marks count as ours: docs/design.md, "Object storage", writers sharing a table)."""
    if not Location.parse(path).is_s3:
        return
    for commit in table.history():
        version = int(commit.get("version", 0))
        spark = str(commit.get("engineInfo", "")).startswith("Apache-Spark")
        if not spark_writes and spark:
            raise MixedDeltaWritersError(path, DELTA_RS_WRITER, SPARK_WRITER, version)
        ours = version == 0 or (
            any(k.startswith("spark_ext.") for k in commit) and "spark_ext.batch_id" not in commit
        )
        if spark_writes and not spark and not ours:
            raise MixedDeltaWritersError(path, SPARK_WRITER, DELTA_RS_WRITER, version)


def _settings(path: str, settings: StorageSettings | None) -> StorageSettings:
    """``settings``, else (a location on object storage) the active session's."""
    from spark_ext.storage import session_settings

    if settings is None and Location.parse(path).is_s3:
        return session_settings()
    return settings or StorageSettings()


def create_table(
    path: str,
    schema: pa.Schema,
    settings: StorageSettings | None = None,
    partition_by: Sequence[str] = (),
) -> None:
    """Create an empty Delta table at ``path`` with delta-rs unless one is there."""
    from deltalake import DeltaTable

    from spark_ext.storage import delta_storage, make_folder

    make_folder(path)  # delta-rs writes a local table into an existing folder
    uri, options = delta_storage(path, _settings(path, settings))
    DeltaTable.create(
        uri,
        schema=schema,
        mode="ignore",
        partition_by=list(partition_by) or None,
        storage_options=options or None,
    )


class LatestTable:
    """The newest snapshot of the Delta table at ``path`` (``settings``: of object storage),
    read incrementally (docs/design.md, "Delta sinks", cost per commit); not thread-safe."""

    def __init__(
        self, path: str | os.PathLike[str], settings: StorageSettings | None = None
    ) -> None:
        self.path = os.fspath(path)
        self.settings = settings
        self._table: Any = None
        self._identity: tuple[int, int] | None = None

    def get(self) -> Any:
        """The table at its newest version, or ``None`` when there is no table yet (reopened
        when its first commit file has another :func:`spark_ext.storage.identity`)."""
        from deltalake import DeltaTable
        from deltalake.exceptions import DeltaError, TableNotFoundError

        from spark_ext import storage

        first = Location.parse(self.path).join("_delta_log", f"{0:020d}.json")
        identity = storage.identity(first, _settings(self.path, self.settings))
        if self._table is not None and identity is not None and identity == self._identity:
            try:
                self._table.update_incremental()
                return self._table
            except DeltaError as exc:  # e.g. a commit file gone: open the table afresh
                log.info("%s: reopening the table (%s)", self.path, exc)
        self._table = None
        from spark_ext.storage import delta_storage

        uri, options = delta_storage(self.path, _settings(self.path, self.settings))
        try:
            table = DeltaTable(uri, storage_options=options or None)
        except TableNotFoundError:
            return None
        self._table, self._identity = table, identity
        return table


@dataclass(frozen=True)
class Marks:
    """What one snapshot records for one sink: its owner and its batch markers."""

    sink_id: str
    #: The owner ``txn``'s version (``None``: none, or expired).
    owner_code: int | None
    #: The owner's query id from the table property (``None``: no owner ever recorded).
    owner_name: str | None
    #: Batch marker app id -> recorded version (``None``: none, or expired).
    batches: Mapping[str, int | None] = field(default_factory=dict)

    @classmethod
    def of(cls, table: Any, sink_id: str, markers: Sequence[str]) -> Marks:
        """The marks of ``sink_id`` in the delta-rs snapshot ``table``."""
        config = table.metadata().configuration or {}
        return cls(
            sink_id,
            table.transaction_version(owner_app_id(sink_id)),
            config.get(owner_property(sink_id)),
            {m: table.transaction_version(m) for m in markers},
        )

    @property
    def owner(self) -> int | None:
        """The recorded owner's code: the ``txn``, else the property's (the ``txn`` expired)."""
        if self.owner_code is not None:
            return self.owner_code
        return SinkOwner(self.owner_name).code if self.owner_name else None

    def _name(self) -> str | None:
        recorded = self.owner
        if self.owner_name and recorded == SinkOwner(self.owner_name).code:
            return self.owner_name
        return None

    def decide(self, target: str, ours: SinkOwner, take_over: bool) -> OwnerDecision:
        """:func:`~spark_ext.sinks.owner.check_owner` on these marks (raises for a stranger); a
        sink with batches but no owner is adopted with a warning."""
        if self.owner is None and any(v is not None for v in self.batches.values()):
            log.warning(
                "%s: sink %r has batches but no owner (written before owners were recorded); "
                "query %s adopts it",
                target,
                self.sink_id,
                ours,
            )
        return check_owner(
            self.sink_id, target, self.owner, ours, take_over=take_over, recorded_name=self._name()
        )

    def check_still_ours(self, target: str, ours: SinkOwner) -> None:
        """Raise :class:`SinkOwnerError` when another query recorded itself as the owner."""
        recorded = self.owner
        if recorded is not None and recorded != ours.code:
            raise SinkOwnerError(target, self.sink_id, self._name() or f"#{recorded}", str(ours))

    def expired(self, marker: str) -> bool:
        """Whether ``marker`` reads as none although an owner is recorded here (expired)."""
        return self.batches.get(marker) is None and self.owner_name is not None


def commit_marks(
    table: Any,
    marks: Marks,
    owner: SinkOwner | None,
    decision: OwnerDecision | None,
    run: tuple[str, int] | None = None,
) -> None:
    """One delta-rs commit against the snapshot ``table``, never retried (``CommitFailedError``
    when another commit landed since): ``run`` (app id, epoch) and ``owner`` after ``decision``
    (made on ``marks``): the owner ``txn``, the property if it changes, markers reset to
    :data:`NO_BATCH` on a take-over or a first record (docs/design.md, "Delta sinks",
    take-over); an expired marker stays gone."""
    from deltalake import CommitProperties, Transaction

    txns = [run] if run else []
    properties = {}
    metadata: dict[str, Any] = {"spark_ext.sink_id": marks.sink_id}
    if run:
        metadata["spark_ext.run"] = run[1]
    if owner is not None:
        txns.append((owner_app_id(marks.sink_id), owner.code))
        first = marks.owner_name is None  # no owner ever recorded here (a marker gone since)
        for marker, version in marks.batches.items():
            if decision is OwnerDecision.TAKE_OVER or (first and version is None):
                txns.append((marker, NO_BATCH))
        if marks.owner_name != owner.query_id:
            properties[owner_property(marks.sink_id)] = owner.query_id
        metadata["spark_ext.owner"] = owner.query_id
    now_ms = int(time.time() * 1000)
    props = CommitProperties(
        custom_metadata=metadata,
        max_commit_retries=0,
        app_transactions=[Transaction(app, version, now_ms) for app, version in txns],
    )
    if properties:
        table.alter.set_table_properties(properties, False, commit_properties=props)
    else:
        table.create_write_transaction(
            [], mode="append", schema=table.schema(), commit_properties=props
        )


class DeltaTxnAppender:
    """Appends one sink's batches to the Delta table ``path`` with Spark's Delta writer, keyed
    by ``txn(marker, batch id)`` (``marker``: default ``sink_id``, else :func:`marker_app_id`).
    ``settings``: of a table on object storage (default: the session's); ``spark_writes=False``
    for a table only marked here and written by delta-rs (:func:`check_writers`).

    Steps (docs/design.md, "Delta sinks"): 1. :meth:`claim` the owner at a run's first call;
    2. :meth:`check` each batch (owner, expiry, order); 3. :meth:`write` it in one Spark commit.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        sink_id: str,
        *,
        marker: str | None = None,
        partition_by: Sequence[str] = (),
        take_over: bool = False,
        max_conflicts: int = 3,
        settings: StorageSettings | None = None,
        spark_writes: bool = True,
    ) -> None:
        self.path = os.fspath(path)
        self.settings = settings
        self.spark_writes = spark_writes
        self.sink_id = validate_sink_id(sink_id)
        self.marker = marker or sink_id
        self.partition_by = tuple(partition_by)
        self.take_over = take_over
        self.max_conflicts = max_conflicts
        #: The owner this writer recorded (its claim), ``None`` before.
        self.owner: SinkOwner | None = None
        self._latest = LatestTable(self.path, settings)

    def _table(self) -> Any:
        check_target_path(self.path, self.settings)
        return self._latest.get()

    def marks(self, table: Any) -> Marks:
        return Marks.of(table, self.sink_id, [self.marker])

    def decide(self, owner: SinkOwner) -> OwnerDecision:
        """The owner decision on the current snapshot (raises for a stranger); writes nothing."""
        table = self._table()
        if table is None:
            return OwnerDecision.FIRST
        return self.marks(table).decide(self.path, owner, self.take_over)

    def claim(
        self, owner: SinkOwner, schema: pa.Schema, *, refuse_expired: bool = True
    ) -> OwnerDecision:
        """Step 1: decide and record ``owner`` (``schema``: the table's, if it is created);
        ``refuse_expired=False`` for a table whose expiry :meth:`check` judges per batch."""
        from deltalake.exceptions import CommitFailedError

        for _ in range(self.max_conflicts + 2):
            table = self._table()
            if table is None:
                create_table(self.path, schema, self.settings, self.partition_by)
                continue
            marks = self.marks(table)
            decision = marks.decide(self.path, owner, self.take_over)
            check_writers(table, self.path, self.spark_writes)
            if refuse_expired and decision is not OwnerDecision.TAKE_OVER:
                self._refuse_expired(table, marks)  # before the record: nothing written
            if decision is not OwnerDecision.SAME or marks.owner_code is None:
                try:
                    commit_marks(table, marks, owner, decision)
                except CommitFailedError as exc:
                    log.info("%s: owner record lost a race (%s); deciding again", self.path, exc)
                    continue
            self.owner = owner
            log.info(
                "%s: sink %r owned by query %s (%s)", self.path, self.sink_id, owner, decision.value
            )
            return decision
        raise ConcurrentWriterError(f"{self.path}: could not record the owner of {self.sink_id!r}")

    def check(self, batch_id: int, *, known_new: bool = False) -> bool:
        """Step 2: whether ``batch_id`` is a replay (skip it); raises if it must not be written.
        ``known_new``: the caller proved the batch new here, so an expired marker is no refusal."""
        table = self._table()
        if table is None:
            return False
        marks = self.marks(table)
        if self.owner is not None:
            marks.check_still_ours(self.path, self.owner)
        if not known_new:
            self._refuse_expired(table, marks)
        return check_batch_order(self.marker, batch_id, marks.batches[self.marker])

    def _refuse_expired(self, table: Any, marks: Marks) -> None:
        """:class:`DeltaTxnExpiredError` when the batch marker is gone although this sink
        wrote here (its owner is recorded, or commits of it are still in the log)."""
        if marks.batches[self.marker] is not None:
            return
        tag = user_metadata(self.marker)  # commits of this marker still in the log
        commits = sum(1 for h in table.history() if h.get("userMetadata") == tag)
        if commits or marks.expired(self.marker):
            raise DeltaTxnExpiredError(self.path, self.marker, commits)

    def write(self, df: DataFrame, batch_id: int) -> None:
        """Step 3: one Spark commit with ``df``'s rows and ``txn(marker, batch_id)``."""
        from delta.exceptions import (
            ConcurrentAppendException,
            ConcurrentTransactionException,
            DeltaConcurrentModificationException,
        )

        for attempt in range(self.max_conflicts + 1):
            if attempt and self.check(batch_id):  # a retry: did a concurrent commit change it?
                return
            writer = (
                df.write.format("delta")
                .mode("append")
                .option("txnAppId", self.marker)
                .option("txnVersion", str(batch_id))
                .option("userMetadata", user_metadata(self.marker))
            )
            if self.partition_by:
                writer = writer.partitionBy(*self.partition_by)
            try:
                writer.save(spark_uri(self.path))
                return
            except ConcurrentTransactionException as exc:
                raise ConcurrentWriterError(
                    f"{self.path}: another query writes with sink id {self.marker!r}"
                ) from exc
            except (ConcurrentAppendException, DeltaConcurrentModificationException) as exc:
                log.warning(
                    "%s batch %d: conflict %s, retry %d", self.marker, batch_id, exc, attempt
                )
        raise ConcurrentWriterError(f"{self.path}: batch {batch_id} kept conflicting")
