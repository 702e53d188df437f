"""The idempotent Delta sink: Spark's Delta writer in ``foreachBatch``, keyed by ``txn``, through
:class:`spark_ext.sinks.delta_txn.DeltaTxnAppender` (the one ``txnAppId`` writer; docs/design.md,
"Delta sinks"). Steps of :data:`~spark_ext.sinks.protocol.DELTA_IDEMPOTENT`:

1. ``before_write``: schema, owner (first call of a run) and batch checked against the ``txn``
   (equal: replay skipped; lower: ``BatchRegressionError``; expired: ``DeltaTxnExpiredError``);
3. ``written``: one Delta commit with the rows and ``txn(sink id, batch id)``.
"""

from __future__ import annotations

import logging

from pyspark.sql import DataFrame

from connectors.delta.table import arrow_schema, check_table_schema
from spark_ext.sinks.delta_txn import DeltaTxnAppender
from spark_ext.sinks.owner import SinkOwner, owner_of
from spark_ext.sinks.protocol import DELTA_IDEMPOTENT
from spark_ext.storage import StorageSettings

__all__ = ["DeltaIdempotentWriter"]

log = logging.getLogger(__name__)


class DeltaIdempotentWriter:
    """``foreachBatch`` function: append with ``txnAppId`` = sink id, ``txnVersion`` = batch id.

    ``owner``: default the streaming query calling it (outside one, required); ``take_over``:
    hand the sink over from another query; ``marker``: the batch marker's app id when this is
    one table of a larger sink (default ``sink_id``); ``settings``: of a table on object
    storage (default: the session's; docs/design.md, "Object storage").
    """

    def __init__(
        self,
        path: str,
        sink_id: str,
        *,
        owner: SinkOwner | None = None,
        take_over: bool = False,
        marker: str | None = None,
        settings: StorageSettings | None = None,
    ) -> None:
        self.appender = DeltaTxnAppender(
            path, sink_id, marker=marker, take_over=take_over, settings=settings
        )
        self.owner = owner

    def _owner(self, df: DataFrame) -> SinkOwner:
        a = self.appender
        check_table_schema(a.path, df.schema, a.settings)
        return owner_of(df, self.owner, f"DeltaIdempotentWriter({a.sink_id!r})")

    def claim(self, df: DataFrame) -> None:
        """Decide and record the owner before the query starts (the table is created with
        ``df``'s schema if missing)."""
        self.appender.claim(self._owner(df), arrow_schema(df.schema))

    def __call__(self, df: DataFrame, batch_id: int) -> None:
        owner = self._owner(df)
        if self.appender.owner != owner:  # the first call of a run (or another query)
            self.appender.claim(owner, arrow_schema(df.schema))
        replay = self.appender.check(batch_id)
        DELTA_IDEMPOTENT.reached(1, batch_id)
        if replay:
            log.info(
                "%s batch %d: already committed, replay skipped", self.appender.marker, batch_id
            )
            return
        self.appender.write(df, batch_id)
        DELTA_IDEMPOTENT.reached(3, batch_id)  # the txn action is part of the same commit
