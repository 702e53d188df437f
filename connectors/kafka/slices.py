"""The two-phase Kafka sink, one transaction per task slice: records never pass the driver (model,
replay by record id, what consumers see: docs/design.md, "Kafka sinks"). Every record carries the
header ``spark_ext.record_id`` = ``<sink id>/<batch id>/<record_id>``. Steps of
:data:`~spark_ext.sinks.protocol.KAFKA_SLICED` (fault points ``kafka_tx.<n>.<step>``):

1. ``initialised`` (task): run epoch checked, ``init_transactions`` (or a kept producer
   probed), slice record read (a batch below it: ``BatchRegressionError``); in the batch the
   start found partly committed, the ids already committed read back;
2. ``in_transaction`` (task): the other records flushed, every delivery checked;
3. ``sliced`` (task): aborted if this digest or every record is committed already, else
   committed with the slice record;
4. ``recorded`` (driver, :func:`record_batch`): batch id, end offsets and slices used; before
   it the driver reaches :data:`SLICES_COMMITTED` (every slice committed, nothing recorded).

At start :func:`recover_slices` fences older drivers, aborts this sink's open slice
transactions and hands the tasks :func:`replay_state`.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from itertools import chain

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSource,
    DataSourceStreamArrowWriter,
    DataSourceStreamWriter,
    WriterCommitMessage,
)
from pyspark.sql.types import StructType

from connectors.kafka.commit import KafkaCommitter
from connectors.kafka.digest import SliceDigest
from connectors.kafka.producer import ConfluentProducer, SliceFenced
from connectors.kafka.progress import SinkProgress, committed_offset
from connectors.kafka.readback import end_offsets, record_id, written_ids
from connectors.kafka.records import NamedRows, check_columns
from connectors.kafka.settings import KafkaSinkSettings
from spark_ext import kafka_clients
from spark_ext.crash import declare
from spark_ext.sinks.errors import (
    BatchRegressionError,
    PartitionOutOfRangeError,
    ProgressInconsistentError,
    TransactionExpiredError,
    WriterFencedError,
)
from spark_ext.sinks.protocol import KAFKA_SLICED
from spark_ext.sinks.task import current_batch_id, task_attempt

log = logging.getLogger(__name__)

__all__ = [
    "FORMAT",
    "SLICES_COMMITTED",
    "KafkaSlicedDataSource",
    "SliceTransaction",
    "SliceWritten",
    "lingering_slices",
    "record_batch",
    "recover_slices",
    "replay_state",
    "write_slice",
]

FORMAT = "spark_ext_kafka_tx"
#: The driver between the two phases: every task committed its slice, the batch not recorded.
SLICES_COMMITTED = declare(
    "kafka_tx_driver.slices_committed", "driver", "kafka_tx: every slice committed, not recorded"
)
#: Offset metadata of a kept producer's probe (docs/design.md, "Kafka sinks", kept producers).
PROBE = '{"probe": true}'


@dataclass(frozen=True)
class SliceWritten(WriterCommitMessage):
    """Commit message of one task; ``skipped``: every row was committed before."""

    index: int
    batch_id: int
    rows: int
    digest: str
    skipped: bool


@dataclass(frozen=True)
class SliceRecord:
    """A slice group's record: the batch it last committed and that batch's digests."""

    batch_id: int
    digests: tuple[str, ...]

    @classmethod
    def parse(cls, settings: KafkaSinkSettings, metadata: str | None) -> SliceRecord | None:
        """The record in ``metadata``; ``None`` if not this sink's or (given) its owner's."""
        # confluent-kafka 2.16 stores the metadata with librdkafka's trailing NUL byte
        text = (metadata or "").rstrip("\x00")
        meta = json.loads(text) if text else {}
        owner = settings.owner
        if meta.get("sink") != settings.sink_id:
            return None
        if owner is not None and meta.get("owner", owner) != owner:
            return None
        return cls(int(meta["batch"]), tuple(meta["digests"]))

    @staticmethod
    def metadata(settings: KafkaSinkSettings, batch_id: int, digests: list[str]) -> str:
        """What slice ``digests`` of ``batch_id`` are recorded as (with the sink's owner)."""
        meta: dict[str, object] = {"sink": settings.sink_id, "batch": batch_id, "digests": digests}
        if settings.owner is not None:
            meta["owner"] = settings.owner
        return json.dumps(meta)


#: This Python worker's producers whose last transaction ended cleanly, by transactional id
#: (docs/design.md, "Kafka sinks", kept producers).
_IDLE: dict[str, ConfluentProducer] = {}


class SliceTransaction:
    """One task's slice of a batch, in one Kafka transaction (steps 1-3; see the module)."""

    def __init__(self, settings: KafkaSinkSettings, index: int) -> None:
        self.settings = settings
        self.index = index
        self.transactional_id = settings.names.slice_id(index)
        self.group = settings.names.slice_group(index)
        self._producer: ConfluentProducer | None = None
        self._reused = False  # kept from an earlier task of this slice in this worker
        self._clean = False  # its last transaction ended cleanly: it may serve the next task
        self.partitions: set[int] = set()  # the output topic's, looked up by open()

    def __enter__(self) -> SliceTransaction:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Keep a cleanly ended producer for the next task of this slice, close any other."""
        if self._producer is not None:
            if self._clean:
                _IDLE[self.transactional_id] = self._producer
            else:
                self._producer.close()
            self._producer = None

    def open(self) -> ConfluentProducer:
        """Run epoch checked, then ``init_transactions`` (or a kept producer), then the
        topic's partitions."""
        if self._producer is None:
            KafkaCommitter(self.settings).check_run_epoch()
            s = self.settings
            idle = _IDLE.pop(self.transactional_id, None)
            if idle is not None:
                self._producer, self._reused = idle, True
                self.partitions = idle.partitions()
                return idle
            producer = ConfluentProducer(s, self.transactional_id)
            try:
                producer.init()
                self.partitions = producer.partitions()
            except SliceFenced as exc:
                producer.close()
                raise WriterFencedError(f"{self.transactional_id}: {exc}") from exc
            self._producer, self._reused = producer, False
        return self._producer

    def _begin(self, batch_id: int) -> ConfluentProducer:
        """Open, then begin a transaction; a kept producer is probed first and replaced if
        fenced."""
        producer = self.open()
        producer.begin()
        if self._reused:
            try:
                producer.probe(self.settings.names.probe_group(self.index), batch_id, PROBE)
            except SliceFenced:
                # not aborted: a fenced producer's abort fails; the fencing init ended it
                log.info("%s slice %d: kept producer fenced, initialising", self.group, self.index)
                self._clean = False
                self.close()
                producer = self.open()
                producer.begin()
        return producer

    def recorded(self) -> SliceRecord | None:
        """The batch this slice last committed (read after :meth:`open`, so stable)."""
        got = committed_offset(self.settings.bootstrap, self.group, self.settings.topic)
        if got is None:
            return None
        return SliceRecord.parse(self.settings, got.metadata)

    def write(self, batch_id: int, batches: Iterator[pa.RecordBatch]) -> SliceWritten:
        """Steps 1-3 for this slice of ``batch_id``; ``batches`` are its non-empty batches."""
        s = self.settings
        if s.recorded is not None and batch_id <= s.recorded:
            return self._replayed(batch_id, batches)
        self._clean = False
        started = time.monotonic()
        producer = self._begin(batch_id)
        try:
            KAFKA_SLICED.reached(1, batch_id)
            last = self.recorded()
            if last is not None and last.batch_id > batch_id:
                raise BatchRegressionError(s.sink_id, batch_id, last.batch_id)
            own = last.digests if last is not None and last.batch_id == batch_id else ()
            written = self._written_before(batch_id)
            prefix = record_id(s.sink_id, batch_id, "").encode()
            digest, sent = SliceDigest(), 0
            for batch in batches:
                digest.add_batch(batch)
                rows = NamedRows.of(batch, prefix, id_as_key=False)
                if rows.partitions is not None:
                    self._check_partitions(rows.partitions)
                if written:
                    rows = rows.without(written)
                producer.send_rows(rows)
                sent += len(rows.values)
            producer.flush(batch_id)
            KAFKA_SLICED.reached(2, batch_id)
            if digest.value in own or not sent:
                producer.abort()
                self._clean = True
                log.info("%s batch %d slice %d: committed before", s.sink_id, batch_id, self.index)
                return SliceWritten(self.index, batch_id, digest.count, digest.value, True)
            meta = SliceRecord.metadata(s, batch_id, [*own, digest.value])
            producer.commit(self.group, batch_id, meta)
            self._clean = True
        except SliceFenced as exc:
            self._abort_quietly(batch_id)
            elapsed_ms = int((time.monotonic() - started) * 1000)
            if elapsed_ms >= s.transaction_timeout_ms:
                raise TransactionExpiredError(
                    s.sink_id, batch_id, elapsed_ms, s.transaction_timeout_ms
                ) from exc
            raise WriterFencedError(
                f"{self.transactional_id} was fenced by another attempt of slice "
                f"{self.index} (a retried or speculative task, or a newer driver)"
            ) from exc
        except BaseException:
            self._abort_quietly(batch_id)
            raise
        KAFKA_SLICED.reached(3, batch_id)
        return SliceWritten(self.index, batch_id, digest.count, digest.value, skipped=False)

    def _replayed(self, batch_id: int, batches: Iterator[pa.RecordBatch]) -> SliceWritten:
        """A task of the batch recorded at start writes nothing; below it:
        :class:`BatchRegressionError`."""
        recorded = self.settings.recorded
        if recorded is not None and batch_id < recorded:
            raise BatchRegressionError(self.settings.sink_id, batch_id, recorded)
        rows = sum(b.num_rows for b in batches)
        log.info(
            "%s batch %d slice %d: recorded, skipped", self.settings.sink_id, batch_id, self.index
        )
        return SliceWritten(self.index, batch_id, rows, "", skipped=True)

    def _written_before(self, batch_id: int) -> set[bytes]:
        """The record ids of ``batch_id`` committed before this start, if it found the batch
        partly committed (:func:`replay_state`)."""
        s = self.settings
        if s.partial != batch_id:
            return set()
        found = written_ids(s, batch_id, s.replay_from or None, read_committed=True)
        log.info(
            "%s batch %d slice %d: %d records of the batch committed before this start",
            s.sink_id,
            batch_id,
            self.index,
            len(found),
        )
        return found

    def _check_partitions(self, wanted: list[int | None]) -> None:
        """:class:`PartitionOutOfRangeError` if a row names a partition the topic lacks."""
        missing = sorted(p for p in set(wanted) - self.partitions if p is not None)
        if missing:
            raise PartitionOutOfRangeError(self.settings.topic, missing[0], self.partitions)

    def _abort_quietly(self, batch_id: int) -> None:
        """Abort the open transaction; if that fails, the slice's next ``init_transactions``
        does."""
        try:
            if self._producer is not None:
                self._producer.abort()
        except Exception as exc:  # any client error: the abort is best effort by design
            log.warning(
                "%s batch %d slice %d: abort failed (%r); left to the next init",
                self.settings.sink_id,
                batch_id,
                self.index,
                exc,
            )


def write_slice(
    settings: KafkaSinkSettings, batch_id: int, batches: Iterator[pa.RecordBatch]
) -> SliceWritten | None:
    """Steps 1-3 for this task's slice of ``batch_id``; ``None`` for an empty slice (it opens
    no transaction)."""
    rows = (b for b in batches if b.num_rows)
    first = next(rows, None)
    if first is None:
        return None
    with SliceTransaction(settings, task_attempt()[0]) as tx:
        return tx.write(batch_id, chain([first], rows))


class KafkaSliceWriter(DataSourceStreamArrowWriter):
    """Each task produces its slice in its own transaction; the driver records the batch."""

    def __init__(self, settings: KafkaSinkSettings) -> None:
        self.settings = settings

    def write(self, iterator: Iterator[pa.RecordBatch]) -> SliceWritten:
        batch_id = current_batch_id()
        written = write_slice(self.settings, batch_id, iterator)
        return written or SliceWritten(task_attempt()[0], batch_id, 0, SliceDigest().value, False)

    def commit(self, messages: Sequence[WriterCommitMessage | None], batchId: int) -> None:
        """Step 4: record the batch (every slice is committed once Spark calls this)."""
        record_batch(self.settings, batchId, [m for m in messages if isinstance(m, SliceWritten)])

    def abort(self, messages: Sequence[WriterCommitMessage | None], batchId: int) -> None:
        """Nothing to undo: a committed slice stays, and the batch's re-run skips it."""
        log.warning(
            "%s batch %d aborted: committed slices stay and are skipped when it re-runs",
            self.settings.sink_id,
            batchId,
        )


#: The driver's committer of each run, by (transactional id, run epoch), kept between batches
#: (docs/design.md, "Kafka sinks", an older driver's late step 4).
_RECORDERS: dict[tuple[str, int | None], KafkaCommitter] = {}


def record_batch(settings: KafkaSinkSettings, batch_id: int, written: list[SliceWritten]) -> None:
    """Step 4 (driver): record ``batch_id`` in a transaction of the driver's transactional
    id; a kept producer fenced by another worker of the run is replaced and the step redone
    (docs/design.md, "Kafka sinks", an older driver's late step 4)."""
    SLICES_COMMITTED.reached(batch_id)
    key = (settings.names.commit_id, settings.run_epoch)
    kept = _RECORDERS.pop(key, None)
    try:
        committer = _record(settings, batch_id, written, kept or KafkaCommitter(settings))
    except WriterFencedError:
        if kept is None:
            raise
        log.info("%s batch %d: kept producer fenced by another worker", settings.sink_id, batch_id)
        committer = _record(settings, batch_id, written, KafkaCommitter(settings))
    for stale in [k for k in _RECORDERS if k[0] == key[0]]:
        _RECORDERS.pop(stale).close()  # an earlier run's, fenced by this one's start
    _RECORDERS[key] = committer


def _record(
    settings: KafkaSinkSettings,
    batch_id: int,
    written: list[SliceWritten],
    committer: KafkaCommitter,
) -> KafkaCommitter:
    """:func:`record_batch` with ``committer``; returns it to be kept (closed if it raised)."""
    try:
        committer.producer()
        recorded, done = committer.progress.check_still_owner(batch_id, settings.owner)
        if done:
            return committer
        used = max((m.index + 1 for m in written), default=0)
        slices = max(recorded.slices if recorded else 0, used)
        committer.record_progress(batch_id, end_offsets(settings.bootstrap, settings.topic), slices)
    except BaseException:
        committer.close()
        raise
    log.info(
        "%s batch %d: %d rows in %d slices (%d re-runs skipped)",
        settings.sink_id,
        batch_id,
        sum(m.rows for m in written),
        len(written),
        sum(m.skipped for m in written),
    )
    KAFKA_SLICED.reached(4, batch_id)
    return committer


class KafkaSlicedDataSource(DataSource):
    """Python data source ``spark_ext_kafka_tx`` (options: :class:`KafkaSinkSettings`)."""

    @classmethod
    def name(cls) -> str:
        return FORMAT

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        check_columns(schema, require_record_id=True)
        return KafkaSliceWriter(KafkaSinkSettings.from_options(self.options))


def lingering_slices(settings: KafkaSinkSettings) -> list[str]:
    """Transactional ids of this sink's slices with a transaction not yet complete."""
    with kafka_clients.admin(settings.bootstrap) as admin:
        # Prepare*: still completing; the start must wait for its slice record
        listed = admin.list_transactions(state_filters=["Ongoing", "PrepareCommit", "PrepareAbort"])
    names = settings.names
    return sorted(
        t.transactional_id
        for rows in listed.values()
        for t in rows
        if names.slice_of_transactional_id(t.transactional_id) is not None
    )


def committed_slices(settings: KafkaSinkSettings) -> list[SliceRecord]:
    """Every slice record of this sink on its topic (groups found by name)."""
    from kafka import TopicPartition

    tp = TopicPartition(settings.topic, 0)
    with kafka_clients.admin(settings.bootstrap) as admin:
        listed = (g["group_id"] for g in admin.list_groups())
        groups = [g for g in listed if settings.names.slice_of_group(g) is not None]
        got = admin.list_group_offsets({g: [tp] for g in groups}) if groups else {}
    found = [offsets[tp] for offsets in got.values() if offsets.get(tp) is not None]
    records = (SliceRecord.parse(settings, f.metadata) for f in found)
    return [r for r in records if r is not None]


def replay_state(settings: KafkaSinkSettings) -> KafkaSinkSettings:
    """The settings with the recorded batch, a partly committed next batch and the end
    offsets to read it back from; slice records of any other batch:
    :class:`ProgressInconsistentError` (docs/design.md, "Kafka sinks")."""
    recorded = SinkProgress(settings.bootstrap, settings.topic, settings.sink_id).read()
    batch = recorded.batch_id if recorded is not None else None
    slices = committed_slices(settings)
    ahead = sorted({r.batch_id for r in slices if batch is None or r.batch_id > batch})
    allowed = [batch + 1] if batch is not None else ahead[:1]
    if any(b not in allowed for b in ahead):
        raise ProgressInconsistentError(
            f"sink {settings.sink_id!r}: slices record batches {ahead} with batch "
            f"{batch} recorded; only the next batch can be partly written"
        )
    return dataclasses.replace(
        settings,
        recorded=batch,
        partial=ahead[0] if ahead else None,
        replay_from=dict(recorded.end_offsets) if recorded is not None else {},
    )


def recover_slices(settings: KafkaSinkSettings, take_over: bool = False) -> KafkaSinkSettings:
    """At start: check and record the owner, fence older drivers, abort this sink's open slice
    transactions; returns the settings for this start's writers (:func:`replay_state`)."""
    committer = KafkaCommitter(settings)
    try:
        epoch = committer.recover(take_over=take_over)
    finally:
        committer.close()
    for transactional_id in lingering_slices(settings):
        producer = ConfluentProducer(settings, transactional_id)
        try:
            producer.init()  # aborts the open transaction
            log.warning(
                "%s: aborted the open transaction of %s", settings.sink_id, transactional_id
            )
        finally:
            producer.close()
    state = replay_state(settings)
    if state.partial is not None:
        log.warning(
            "%s: batch %d is partly committed; its re-run writes only the records not in %s",
            settings.sink_id,
            state.partial,
            settings.topic,
        )
    return dataclasses.replace(state, run_epoch=epoch)
