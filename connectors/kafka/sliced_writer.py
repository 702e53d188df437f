"""The two-phase Kafka sink as a ``foreachBatch`` writer: each Spark partition of the batch a
slice, written by ``mapInArrow`` with the steps of :mod:`connectors.kafka.slices`; recovery at
the first batch of a run (docs/design.md, "Kafka sinks"). The rows need a ``record_id`` column.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Iterator

import pyarrow as pa
from pyspark.sql import DataFrame

from connectors.kafka.progress import SinkProgress
from connectors.kafka.records import check_columns, require_topic
from connectors.kafka.settings import KafkaSinkSettings
from connectors.kafka.slices import SliceWritten, record_batch, recover_slices, write_slice
from spark_ext.sinks.owner import SinkOwner, owner_of

__all__ = ["KafkaTwoPhaseWriter"]

log = logging.getLogger(__name__)

#: The fields of :class:`SliceWritten`, a row per slice.
_WRITTEN = "index long, batch_id long, rows long, digest string, skipped boolean"


class KafkaTwoPhaseWriter:
    """``foreachBatch`` writer: each record once, a transaction per slice. Options as for
    :func:`connectors.sinks.exactly_once_to_kafka`; ``owner``: default the streaming query
    calling it (outside one, required); without ``take_over`` another owner is
    :class:`~spark_ext.sinks.errors.SinkOwnerError` at the first batch.

    >>> df.writeStream.foreachBatch(KafkaTwoPhaseWriter(bootstrap, "out", "out_1"))  # doctest: +SKIP
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
        self.base = KafkaSinkSettings(
            bootstrap, topic, sink_id, transaction_timeout_ms, delivery_timeout_ms
        )
        self.owner = SinkOwner(owner) if isinstance(owner, str) else owner
        self.take_over = take_over
        self._settings: KafkaSinkSettings | None = None
        self._last: int | None = None

    def _recovered(self, df: DataFrame, batch_id: int) -> KafkaSinkSettings:
        """This run's settings, recovered (:func:`recover_slices`) at the first batch of a run."""
        if self._settings is None or self._last is None or batch_id != self._last + 1:
            owner = owner_of(df, self.owner, "KafkaTwoPhaseWriter")
            require_topic(self.base.bootstrap, self.base.topic)
            base = dataclasses.replace(self.base, owner=owner.query_id)
            self._settings = recover_slices(base, take_over=self.take_over)
        return self._settings

    def __call__(self, df: DataFrame, batch_id: int) -> None:
        check_columns(df.schema, require_record_id=True)
        settings = self._recovered(df, batch_id)
        self._last = None  # until this batch is recorded: a failed call recovers next time
        progress = SinkProgress(settings.bootstrap, settings.topic, settings.sink_id)
        if progress.check_still_owner(batch_id, settings.owner)[1]:
            log.info("%s batch %d: already recorded, replay skipped", settings.sink_id, batch_id)
        else:
            record_batch(settings, batch_id, self.write_slices(df, batch_id, settings))
        self._last = batch_id

    @staticmethod
    def write_slices(
        df: DataFrame, batch_id: int, settings: KafkaSinkSettings
    ) -> list[SliceWritten]:
        """Steps 1-3: every slice of ``df`` committed (or found committed) in the topic, by
        :func:`write_slice` in ``mapInArrow`` (an empty slice gives no row)."""

        def write(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
            if (w := write_slice(settings, batch_id, batches)) is not None:
                yield pa.RecordBatch.from_pylist([dataclasses.asdict(w)])

        return [SliceWritten(**r.asDict()) for r in df.mapInArrow(write, _WRITTEN).collect()]
