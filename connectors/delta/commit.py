"""The one delta-rs commit of staged files as batch ``B`` of a batch marker (docs/design.md, "Delta
sinks"): the two-phase sink's step 3 and the dedup sink's catalog commit. Steps of
:func:`commit_files`, numbered in its code:

1. the newest snapshot, judged by the caller's ``check`` (it refuses, or finds the batch
   recorded: nothing committed);
2. one commit of the adds and the ``txn`` actions against it, ``max_commit_retries=0``;
3. ``CommitFailedError``: the table moved (a lost race): back to 1; it did not:
   :class:`~spark_ext.sinks.errors.DeltaCommitRefusedError`;
4. any other error of the call: the table is read back; a commit that landed is committed,
   else ``ConcurrentWriterError`` (another writer recorded the batch), ``CommitUncertainError``
   (unreadable) or the error itself.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from connectors.delta.log import referenced_files
from spark_ext.sinks.delta_txn import LatestTable
from spark_ext.sinks.errors import (
    CommitUncertainError,
    ConcurrentWriterError,
    DeltaCommitRefusedError,
)
from spark_ext.storage import StorageSettings

if TYPE_CHECKING:
    from deltalake import Transaction
    from deltalake.transaction import AddAction

__all__ = ["commit_files"]

log = logging.getLogger(__name__)


def commit_files(
    path: str,
    snapshot: Callable[[], Any],
    marker: str,
    batch_id: int,
    adds: Sequence[AddAction],
    txns: Sequence[Transaction],
    check: Callable[[Any], bool],
    *,
    partition_by: Sequence[str] = (),
    commit_empty: bool = True,
    max_conflicts: int = 5,
    settings: StorageSettings | None = None,
) -> bool:
    """Commit ``adds`` and ``txns`` (with ``txn(marker, batch_id)``) to the table at ``path``;
    ``False`` if ``check(snapshot)`` found the batch recorded (it raises to refuse a snapshot).
    ``commit_empty=False``: no commit without adds; ``max_conflicts + 1`` lost races in a row:
    :class:`ConcurrentWriterError`; ``settings``: of a table on object storage."""
    from deltalake import CommitProperties
    from deltalake.exceptions import CommitFailedError

    properties = CommitProperties(
        custom_metadata={"spark_ext.sink_id": marker, "spark_ext.batch_id": batch_id},
        max_commit_retries=0,
        app_transactions=list(txns),
    )
    for attempt in range(max_conflicts + 1):
        table = snapshot()  # 1. the snapshot the commit is made against
        if table is None:
            from deltalake.exceptions import TableNotFoundError

            raise TableNotFoundError(f"no Delta table at {path}")
        if check(table):
            return False
        if not adds and not commit_empty:
            return True
        try:  # 2.
            table.create_write_transaction(
                list(adds),
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
            if not _landed(path, marker, batch_id, adds, exc, settings):
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
    adds: Sequence[AddAction],
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
    if all(a.path in referenced for a in adds):
        return True
    raise ConcurrentWriterError(
        f"{path}: batch {batch_id} was recorded by another writer with batch marker "
        f"{marker!r} while this commit raised ({exc})"
    )
