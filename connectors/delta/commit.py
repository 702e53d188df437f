"""The one delta-rs commit of staged files as batch ``B`` of a batch marker (docs/design.md, "Delta
sinks"): the two-phase sink's step 3 and the dedup sink's catalog commit. Steps of
:func:`commit_files`, numbered in its code:

1. the newest snapshot, checked (run epoch, owner, the table's features, then the caller's
   ``check``, which may find the batch recorded): a refusal or a replay commits nothing;
2. one commit of the adds and the ``txn`` actions against it, ``max_commit_retries=0``;
3. ``CommitFailedError``: the table moved (a lost race): back to 1; it did not:
   :class:`~spark_ext.sinks.errors.DeltaCommitRefusedError`;
4. any other error of the call: the table is read back; a commit that landed is committed,
   else ``ConcurrentWriterError`` (another writer recorded the batch), ``CommitUncertainError``
   (unreadable) or the error itself.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from typing import Any

from connectors.delta.log import referenced_files
from connectors.delta.table import check_snapshot
from spark_ext.sinks.delta_txn import LatestTable, Marks, owner_app_id
from spark_ext.sinks.errors import (
    CommitUncertainError,
    ConcurrentWriterError,
    DeltaCommitRefusedError,
    DriverFencedError,
)
from spark_ext.sinks.owner import SinkOwner
from spark_ext.storage import StorageSettings

__all__ = ["StagedAdd", "check_run", "commit_files"]

log = logging.getLogger(__name__)

#: One staged file to add: ``(path relative to the table, size, partition values, stats JSON)``.
StagedAdd = tuple[str, int, dict[str, str], str]


def commit_files(
    path: str,
    snapshot: Callable[[], Any],
    sink_id: str,
    marker: str,
    batch_id: int,
    adds: Sequence[StagedAdd],
    check: Callable[[Any], bool],
    *,
    owner: SinkOwner | None = None,
    run: tuple[str, int] | None = None,
    rows_json: str | None = None,
    partition_by: Sequence[str] = (),
    commit_empty: bool = True,
    max_conflicts: int = 5,
    settings: StorageSettings | None = None,
) -> bool:
    """Commit ``adds`` with ``txn(marker, batch_id)`` to the table at ``path``; ``False`` if
    ``check(snapshot)`` found the batch recorded (it raises to refuse a snapshot). Checked here
    first, and recorded: ``run`` (app id, run epoch: :func:`check_run`), ``owner``; then
    :func:`check_snapshot` of ``rows_json``. ``commit_empty=False``: no commit without adds;
    ``max_conflicts + 1`` lost races in a row: :class:`ConcurrentWriterError`; ``settings``: of
    a table on object storage."""
    from deltalake import CommitProperties, Transaction
    from deltalake.exceptions import CommitFailedError
    from deltalake.transaction import AddAction

    now_ms = int(time.time() * 1000)
    actions = [AddAction(p, size, parts, now_ms, True, stats) for p, size, parts, stats in adds]
    marks = [(marker, batch_id), *([run] if run else [])]
    if owner is not None:  # refreshed with every commit: it never expires under its owner
        marks.append((owner_app_id(sink_id), owner.code))
    properties = CommitProperties(
        custom_metadata={"spark_ext.sink_id": marker, "spark_ext.batch_id": batch_id},
        max_commit_retries=0,
        app_transactions=[Transaction(a, v, now_ms) for a, v in marks],
    )
    for attempt in range(max_conflicts + 1):
        table = snapshot()  # 1. the snapshot the commit is made against
        if table is None:
            from deltalake.exceptions import TableNotFoundError

            raise TableNotFoundError(f"no Delta table at {path}")
        check_run(table, path, sink_id, run)
        if owner is not None:
            Marks.of(table, sink_id, [marker]).check_still_ours(path, owner)
        check_snapshot(table, path, rows_json, tuple(partition_by))
        if check(table):
            return False
        if not adds and not commit_empty:
            return True
        try:  # 2.
            table.create_write_transaction(
                actions,
                mode="append",
                schema=table.schema(),
                partition_by=list(partition_by) or None,
                commit_properties=properties,
            )
        except CommitFailedError as exc:  # 3.
            _check_lost_race(path, table, batch_id, exc, settings)
            log.warning(
                "%s batch %d: commit lost a race (%s), re-checking (%d)",
                marker,
                batch_id,
                exc,
                attempt + 1,
            )
            continue
        except Exception as exc:  # 4.
            if not _landed(path, marker, batch_id, [a[0] for a in adds], exc, settings):
                raise
            log.warning(
                "%s batch %d: committed, then the commit call raised (%s); the batch is committed",
                marker,
                batch_id,
                exc,
            )
        return True
    raise ConcurrentWriterError(
        f"{path}: batch {batch_id} lost {max_conflicts + 1} commit races in a row"
    )


def check_run(table: Any, path: str, sink_id: str, run: tuple[str, int] | None) -> None:
    """:class:`DriverFencedError` when ``table`` records a newer run than ``run`` (app id,
    epoch; ``None``: unchecked)."""
    current = table.transaction_version(run[0]) if run else None
    if run and current is not None and current != run[1]:
        raise DriverFencedError(path, sink_id, run[1], current)


def _check_lost_race(
    path: str, table: Any, batch_id: int, exc: Exception, settings: StorageSettings | None
) -> None:
    """:class:`DeltaCommitRefusedError` unless another commit landed since the snapshot ``table``."""
    try:
        moved = LatestTable(path, settings).get().version() > table.version()
    except Exception:
        moved = True  # cannot tell: treat as a race, re-checked on the next snapshot
    if not moved:
        raise DeltaCommitRefusedError(path, batch_id, str(exc)) from exc


def _landed(
    path: str,
    marker: str,
    batch_id: int,
    paths: Sequence[str],
    exc: Exception,
    settings: StorageSettings | None,
) -> bool:
    """After a commit call raised: did this commit of ``batch_id`` land? (re-read the log)"""
    try:
        recorded = LatestTable(path, settings).get().transaction_version(marker)
        referenced = referenced_files(path, settings)
    except Exception as again:
        raise CommitUncertainError(
            f"{path}: batch {batch_id}: commit raised ({exc}) and the table could "
            f"not be read back ({again})"
        ) from exc
    if recorded is None or recorded < batch_id:
        return False
    if all(p in referenced for p in paths):
        return True
    raise ConcurrentWriterError(
        f"{path}: batch {batch_id} was recorded by another writer with batch marker "
        f"{marker!r} while this commit raised ({exc})"
    )
