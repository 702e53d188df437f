"""The two-phase Kafka sink with a transaction per slice, as a ``foreachBatch`` writer.

:class:`KafkaTwoPhaseWriter` runs the steps of :mod:`connectors.kafka.slices` in
``foreachBatch`` (each Spark partition a slice, through ``mapInArrow``), for queries that hand
rows to a function (a tracked query's writer); same guarantees, recovery at the first batch of
a run (docs/design.md, "Kafka sinks"). The rows need a ``record_id`` column.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Iterator
from itertools import chain

import pyarrow as pa
from pyspark.sql import DataFrame

from connectors.kafka.owner import check_still_owner, writer_owner
from connectors.kafka.progress import SinkProgress
from connectors.kafka.records import check_columns, require_topic, task_attempt
from connectors.kafka.settings import KafkaSinkSettings
from connectors.kafka.slices import SliceTransaction, SliceWritten, record_batch, recover_slices
from spark_ext.sinks.owner import SinkOwner
from spark_ext.sinks.protocol import check_batch_order

__all__ = ["KafkaTwoPhaseWriter", "slice_settings", "slice_task"]

log = logging.getLogger(__name__)

_WRITTEN = pa.schema(
    [("index", pa.int32()), ("rows", pa.int64()), ("digest", pa.string()), ("skipped", pa.bool_())]
)
_WRITTEN_DDL = "index int, rows long, digest string, skipped boolean"


def slice_settings(
    bootstrap: str,
    topic: str,
    sink_id: str,
    transaction_timeout_ms: int,
    delivery_timeout_ms: int,
    owner: SinkOwner | None = None,
) -> KafkaSinkSettings:
    """The settings of a transaction-per-slice sink, before recovery."""
    return KafkaSinkSettings(
        bootstrap=bootstrap,
        topic=topic,
        sink_id=sink_id,
        transaction_timeout_ms=transaction_timeout_ms,
        delivery_timeout_ms=delivery_timeout_ms,
        owner=owner.query_id if owner is not None else None,
    )


def slice_task(
    settings: KafkaSinkSettings, batch_id: int
) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """The ``mapInArrow`` function of a batch: steps 1-3 for the task's slice, one row out
    (nothing for an empty slice: it opens no transaction)."""

    def write(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        index, _attempt = task_attempt()
        rows = (b for b in batches if b.num_rows)
        first = next(rows, None)
        if first is None:
            return
        with SliceTransaction(settings, index) as tx:
            w = tx.write(batch_id, chain([first], rows))
        yield pa.RecordBatch.from_pylist(
            [{"index": w.index, "rows": w.rows, "digest": w.digest, "skipped": w.skipped}],
            schema=_WRITTEN,
        )

    return write


class KafkaTwoPhaseWriter:
    """``foreachBatch`` writer: each record once, a transaction per slice.

    Parameters
    ----------
    bootstrap, topic
        The output topic (it must exist: :class:`~spark_ext.sinks.errors.TopicMissingError`).
    sink_id
        Names the slice groups, transactional ids and progress group; keep it across restarts.
    transaction_timeout_ms, delivery_timeout_ms
        As for :func:`connectors.sinks.exactly_once_to_kafka`.
    owner
        The query that owns the sink; default: the streaming query calling this writer
        (outside one, required: else :class:`~spark_ext.sinks.errors.SinkConfigError`).
    take_over
        Hand the sink over from another owner (batch ids restart at 0); without it another
        owner is :class:`~spark_ext.sinks.errors.SinkOwnerError` at the first batch.

    Example
    -------
    >>> write = KafkaTwoPhaseWriter(bootstrap, "out", "out_1")                # doctest: +SKIP
    >>> df.writeStream.foreachBatch(write)                                    # doctest: +SKIP
    """

    def __init__(
        self,
        bootstrap: str,
        topic: str,
        sink_id: str,
        transaction_timeout_ms: int = 300_000,
        delivery_timeout_ms: int = 120_000,
        owner: SinkOwner | str | None = None,
        take_over: bool = False,
    ) -> None:
        self.base = slice_settings(
            bootstrap, topic, sink_id, transaction_timeout_ms, delivery_timeout_ms
        )
        self.owner = SinkOwner(owner) if isinstance(owner, str) else owner
        self.take_over = take_over
        self._settings: KafkaSinkSettings | None = None
        self._last: int | None = None

    def _recovered(self, df: DataFrame, batch_id: int) -> KafkaSinkSettings:
        """This run's settings: recovery (:func:`recover_slices`, the owner checked first) at
        the first batch of a run."""
        if self._settings is None or self._last is None or batch_id != self._last + 1:
            owner = writer_owner(self.owner, df, "KafkaTwoPhaseWriter")
            require_topic(self.base.bootstrap, self.base.topic)
            base = dataclasses.replace(self.base, owner=owner.query_id)
            self._settings = recover_slices(base, take_over=self.take_over)
        return self._settings

    def __call__(self, df: DataFrame, batch_id: int) -> None:
        check_columns(df.schema, require_record_id=True)
        settings = self._recovered(df, batch_id)
        self._last = None  # until this batch is recorded: a failed call recovers next time
        progress = SinkProgress(settings.bootstrap, settings.topic, settings.sink_id)
        recorded = progress.read()
        check_still_owner(progress, recorded, settings.owner)
        if check_batch_order(settings.sink_id, batch_id, recorded.batch_id if recorded else None):
            log.info("%s batch %d: already recorded, replay skipped", settings.sink_id, batch_id)
        else:
            record_batch(settings, batch_id, self.write_slices(df, batch_id, settings))
        self._last = batch_id

    @staticmethod
    def write_slices(
        df: DataFrame, batch_id: int, settings: KafkaSinkSettings
    ) -> list[SliceWritten]:
        """Steps 1-3: every slice of ``df`` committed (or found committed) in the topic."""
        got = df.mapInArrow(slice_task(settings, batch_id), _WRITTEN_DDL).collect()
        return [
            SliceWritten(int(r["index"]), batch_id, int(r["rows"]), r["digest"], r["skipped"])
            for r in got
        ]
