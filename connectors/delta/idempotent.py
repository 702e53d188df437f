"""The idempotent Delta sink: Spark's Delta writer in ``foreachBatch``, keyed by ``txn``.

Steps as in :mod:`spark_ext.sinks.protocol` (``IDEMPOTENT``, Delta has 1 and 3), each batch
through :class:`spark_ext.sinks.delta_txn.DeltaTxnAppender` (the one ``txnAppId`` writer):

1. ``before_write``: target and schema checked; at the first call of a run the owner decided
   and recorded; the batch checked against the recorded ``txn`` (equal: replay, lower:
   ``BatchRegressionError``, expired: ``DeltaTxnExpiredError``); nothing written on refusal.
3. ``written``: one Delta commit with the rows and ``txn(sink id, batch id)``.
"""

from __future__ import annotations

import logging

from pyspark.sql import DataFrame

from connectors.delta.table import arrow_schema, check_table_schema
from spark_ext.sinks.delta_txn import DeltaTxnAppender, owner_of
from spark_ext.sinks.owner import SinkOwner
from spark_ext.sinks.protocol import DELTA_IDEMPOTENT, Protocol

__all__ = ["DeltaIdempotentWriter"]

log = logging.getLogger(__name__)


class DeltaIdempotentWriter:
    """``foreachBatch`` function: append with ``txnAppId`` = sink id, ``txnVersion`` = batch id.

    Parameters
    ----------
    path
        The Delta table folder.
    sink_id
        Delta's ``txnAppId`` (the batch id is ``txnVersion``).
    max_conflicts
        Retries of a write that lost a race (each checked again, same ``txnVersion``).
    owner
        The query that owns the sink; default: the streaming query calling this function
        (outside one, required).
    take_over
        Hand the sink over from another query: batch marker reset, old owner refused.
    marker
        The batch marker's app id when this writer is one table of a larger sink (default:
        ``sink_id``; e.g. ``marker_app_id(sink_id, "quarantine")``).
    """

    protocol: Protocol = DELTA_IDEMPOTENT

    def __init__(
        self,
        path: str,
        sink_id: str,
        max_conflicts: int = 3,
        *,
        owner: SinkOwner | None = None,
        take_over: bool = False,
        marker: str | None = None,
    ) -> None:
        self.appender = DeltaTxnAppender(
            path, sink_id, marker=marker, take_over=take_over, max_conflicts=max_conflicts
        )
        self.path = self.appender.path
        self.sink_id = self.appender.sink_id
        self.owner = owner

    def claim(self, df: DataFrame) -> None:
        """Decide and record the owner now (before the query starts), creating the table with
        ``df``'s schema if it is missing; the first batch then finds it recorded."""
        check_table_schema(self.path, df.schema)
        owner = owner_of(df, self.owner, f"DeltaIdempotentWriter({self.sink_id!r})")
        self.appender.claim(owner, arrow_schema(df.schema))

    def __call__(self, df: DataFrame, batch_id: int) -> None:
        check_table_schema(self.path, df.schema)
        owner = owner_of(df, self.owner, f"DeltaIdempotentWriter({self.sink_id!r})")
        if self.appender.owner != owner:  # the first call of a run (or another query)
            self.appender.claim(owner, arrow_schema(df.schema))
        # 1. before_write: a replay is skipped, a regression raises; nothing written either way.
        replay = self.appender.check(batch_id)
        self.protocol.reached(1, batch_id)
        if replay:
            log.info("%s batch %d: already committed, replay skipped", self.sink_id, batch_id)
            return
        self.appender.write(df, batch_id)
        # 3. written (and marked: the txn action is part of the same Delta commit).
        self.protocol.reached(3, batch_id)
