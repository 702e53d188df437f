"""The idempotent Delta sink: Spark's Delta writer in ``foreachBatch``, keyed by ``txn``.

Steps as in :mod:`spark_ext.sinks.protocol` (``IDEMPOTENT``, Delta has 1 and 3):

1. ``before_write``: the schema fits the table, and the batch id is checked against the
   ``txn`` version recorded for the sink id: equal is a replay (nothing written), lower is
   :class:`~spark_ext.sinks.errors.BatchRegressionError` (nothing written). No ``txn`` while
   the table's history holds commits of this sink (each carries ``userMetadata`` =
   ``spark_ext.sink_id=<sink id>``) means the ``txn`` expired
   (``delta.setTransactionRetentionDuration``):
   :class:`~spark_ext.sinks.errors.DeltaTxnExpiredError`, nothing written.
3. ``written``: one Delta commit with the rows and ``txn(appId=sink id, version=batch id)``
   (``txnAppId``/``txnVersion``), so a replay that slips past step 1 is skipped by Delta.
"""

from __future__ import annotations

import logging

from pyspark.sql import DataFrame

from connectors.delta_table import check_table_schema
from spark_ext.sinks.errors import (
    ConcurrentWriterError,
    DeltaTxnExpiredError,
    check_batch_order,
)
from spark_ext.sinks.protocol import DELTA_IDEMPOTENT, Protocol, validate_sink_id

log = logging.getLogger(__name__)


def recorded_batch(path: str, sink_id: str) -> int | None:
    """The ``txn`` version recorded for ``sink_id`` in the table at ``path`` (None if none)."""
    from deltalake import DeltaTable
    from deltalake.exceptions import TableNotFoundError

    try:
        version: int | None = DeltaTable(path).transaction_version(sink_id)
    except TableNotFoundError:
        return None
    return version


def user_metadata(sink_id: str) -> str:
    """The ``userMetadata`` every commit of the idempotent sink ``sink_id`` carries."""
    return f"spark_ext.sink_id={sink_id}"


def commits_of(path: str, sink_id: str) -> int:
    """How many commits in the table's history carry :func:`user_metadata` of ``sink_id``."""
    from deltalake import DeltaTable
    from deltalake.exceptions import TableNotFoundError

    try:
        history = DeltaTable(path).history()
    except TableNotFoundError:
        return 0
    tag = user_metadata(sink_id)
    return sum(1 for h in history if h.get("userMetadata") == tag)


class DeltaIdempotentWriter:
    """``foreachBatch`` function: append with ``txnAppId`` = sink id, ``txnVersion`` = batch id.

    Parameters
    ----------
    path
        The Delta table folder.
    sink_id
        Delta's ``txnAppId``; a batch whose id equals the recorded ``txnVersion`` is a replay
        and adds nothing, a lower one raises :class:`BatchRegressionError`.
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
        # 1. before_write: a replay is skipped, a regression raises; nothing written either way.
        recorded = recorded_batch(self.path, self.sink_id)
        if recorded is None:
            ours = commits_of(self.path, self.sink_id)
            if ours:
                raise DeltaTxnExpiredError(self.path, self.sink_id, ours)
        if check_batch_order(self.sink_id, batch_id, recorded):
            log.info("%s batch %d: already committed, replay skipped", self.sink_id, batch_id)
            self.protocol.reached(1, batch_id)
            return
        self.protocol.reached(1, batch_id)
        for attempt in range(self.max_conflicts + 1):
            try:
                (
                    df.write.format("delta")
                    .mode("append")
                    .option("txnAppId", self.sink_id)
                    .option("txnVersion", str(batch_id))
                    .option("userMetadata", user_metadata(self.sink_id))
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
