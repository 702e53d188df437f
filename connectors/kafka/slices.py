"""The two-phase Kafka sink, one transaction per task slice: records never pass the driver.

Model (issue #14, model (b))
----------------------------
Each write task produces its slice of the batch straight to the output topic inside its own
Kafka transaction, and commits that transaction together with a *slice record*: the committed
offset of the group ``spark_ext.sink:<sink id>:s<i>`` (``i`` = the task's partition id) on the
topic's partition 0, whose offset is the batch id and whose metadata lists the digests of the
slices committed under ``i`` for that batch. A slice's digest is order-independent (count and
sum of 64-bit hashes of its records *with their* ``record_id``, the input coordinates, so two
slices never share one). Every record carries the header ``spark_ext.record_id`` =
``<sink id>/<batch id>/<record_id>``. The driver only records the batch, with the end offset
of every output partition.

Why this model and not Flink's (the driver commits every task's transaction by resuming
producer id and epoch): docs/design.md, "Kafka sinks". With a transaction per slice every step
is a public client call, and the fencing Flink gets from resumed epochs comes from the
transactional id: a retried or speculative attempt of task ``i`` initialises ``spark_ext.tx:<sink id>:<topic>:s<i>``, which
fences the other attempt and settles its open transaction before the slice record is read.

A replay is recognised without looking at how Spark slices it (issue #24, N1): the same
offsets give the same rows, not the same slices (the Kafka source's ``minPartitions``, a
``coalesce``, the rate source and file splits follow settings a restart may change, and the
Kafka source orders a replayed batch's offset ranges as its offset log lists them). So a
task of the batch recorded at start writes nothing, and a task of a batch some of whose
slices a killed run committed reads back the record ids of that batch already committed
(``read_committed``, from the end offsets recorded with the batch before) and writes only the
other records. Within one run a slice's rows stay with its task index, so a retried or
speculative attempt is recognised by the digests under its index, without a read-back.

Steps (fault points ``kafka_tx.<n>.<step>``, :data:`~spark_ext.sinks.protocol.KAFKA_SLICED`)
1. ``initialised`` (task): the run epoch is checked (a task of an older driver stops with
   :class:`~spark_ext.sinks.errors.DriverFencedError` before it can fence anything),
   ``init_transactions`` fenced every other attempt of the slice (a producer this Python worker
   kept from the slice's previous task is probed instead: :meth:`SliceTransaction._begin`),
   and the slice record is read.
   A batch id below it raises :class:`~spark_ext.sinks.errors.BatchRegressionError` (X1),
   nothing written. An empty slice writes nothing and opens no transaction, nor does a task of
   a batch at or below the one recorded at start (below: ``BatchRegressionError``). In the
   batch the start found partly committed the task reads back the ids already committed.
2. ``in_transaction`` (task): every record not read back flushed into the open transaction and
   every produce future checked (K1: an undelivered record aborts the transaction and raises
   :class:`~spark_ext.sinks.errors.ProduceFailedError`); nothing committed.
3. ``sliced`` (task): if the slice's digest is already committed under this index for this
   batch (an earlier attempt), or every record was read back, the transaction is aborted (a
   re-run, nothing becomes visible); else it is committed with the slice record. A transaction that outlived
   ``transaction_timeout_ms`` was aborted by the broker:
   :class:`~spark_ext.sinks.errors.TransactionExpiredError`, and Spark retries the task (the
   bound is one task's slice, not the whole batch: K5).
4. ``recorded`` (driver): the batch id, the end offset of every output partition (every
   record of the next batch lies above them) and how many slices the sink has used are recorded
   in the sink-progress group ``spark_ext.sink:<sink id>``, in a transaction of the driver's
   transactional id (a newer start fences it: an older driver's late step 4 fails instead of
   moving the record back, :func:`record_batch`); a lower id than the recorded one raises
   :class:`~spark_ext.sinks.errors.BatchRegressionError`, another owner
   :class:`~spark_ext.sinks.errors.SinkOwnerError`.

At start (:func:`recover_slices`) the driver fences older drivers (run epoch), aborts every
transaction of this sink's slices still open (a task killed mid-transaction, found with
``ListTransactions``) so ``read_committed`` consumers are not held back until the broker's
timeout, and reads the recorded batch and the slice records of the next one
(:func:`replay_state`): the recorded batch, whether the next is partly committed, and where
its records can begin are handed to the tasks.

What consumers see: a ``read_committed`` consumer sees a batch *slice by slice*: each task's
records at once when its transaction commits, the batch complete once every task committed;
never a record twice. A ``read_uncommitted`` consumer also sees the records of aborted
transactions (a retried attempt, a task killed mid-transaction, a re-run slice), so it may see
records twice. No mode makes a whole batch visible at once (docs/design.md, "Kafka sinks").

Not covered: a task of an older driver that passed its run-epoch check just before a new start
and commits after the start read the slice records (the window between a check and
``init_transactions``); the new start's run epoch refuses it on its next batch.
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

from connectors.kafka.clients import ConfluentProducer, SliceFenced
from connectors.kafka.commit import KafkaCommitter
from connectors.kafka.digest import SliceDigest
from connectors.kafka.owner import check_still_owner
from connectors.kafka.progress import SinkProgress
from connectors.kafka.readback import end_offsets, record_id, written_ids
from connectors.kafka.records import (
    RECORD_ID_HEADER,
    NamedRows,
    check_columns,
    current_batch_id,
    task_attempt,
)
from connectors.kafka.settings import KafkaSinkSettings
from spark_ext.sinks.errors import (
    BatchRegressionError,
    PartitionOutOfRangeError,
    ProgressInconsistentError,
    TransactionExpiredError,
    WriterFencedError,
)
from spark_ext.sinks.protocol import KAFKA_SLICED, check_batch_order

log = logging.getLogger(__name__)

__all__ = [
    "FORMAT",
    "KafkaSliceWriter",
    "KafkaSlicedDataSource",
    "SliceDigest",
    "SliceTransaction",
    "SliceWritten",
    "committed_slices",
    "lingering_slices",
    "record_batch",
    "recover_slices",
    "replay_state",
]

FORMAT = "spark_ext_kafka_tx"
#: Offset metadata a kept producer adds to its transaction to prove its epoch is current, for
#: the group ``<slice group>.probe`` (never the slice group itself: a pending offset of the open
#: transaction would make the stable read of the slice record wait for that transaction).
PROBE = '{"probe": true}'


@dataclass(frozen=True)
class SliceWritten(WriterCommitMessage):
    """Commit message of one task: its slice index, rows and digest, and whether every row
    of it was committed before (``skipped``: a replay of the recorded batch, a re-run slice, or
    a partly committed batch's rows found in the topic; nothing of this attempt is visible to
    ``read_committed`` consumers)."""

    index: int
    batch_id: int
    rows: int
    digest: str
    skipped: bool


@dataclass(frozen=True)
class SliceRecord:
    """What a slice group holds: the batch its index last committed, and the digests of the
    slices committed under it for that batch (more than one when a re-run moved rows)."""

    batch_id: int
    digests: tuple[str, ...]

    @classmethod
    def parse(
        cls, sink_id: str, metadata: str | None, owner: str | None = None
    ) -> SliceRecord | None:
        """The record in ``metadata``, or ``None`` if it is not this sink's or (``owner``
        given) was written by another owner (the sink was handed over since: its batches are
        not ours)."""
        # confluent-kafka 2.16 stores the metadata with librdkafka's trailing NUL byte
        text = (metadata or "").rstrip("\x00")
        meta = json.loads(text) if text else {}
        if meta.get("sink") != sink_id:
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


#: Producers of this Python worker whose last transaction ended cleanly (committed or
#: aborted), by transactional id: the next task of the same slice in this worker reuses one
#: instead of paying ``init_transactions`` (a few hundred ms) per task and batch. A producer
#: another worker or attempt has fenced since is found by the probe of
#: :meth:`SliceTransaction._begin`, before anything is read, and replaced; a producer whose
#: transaction did not end cleanly is never put back.
_IDLE: dict[str, ConfluentProducer] = {}


class SliceTransaction:
    """One task's slice of a batch, in one Kafka transaction (steps 1-3; see the module)."""

    def __init__(self, settings: KafkaSinkSettings, index: int) -> None:
        self.settings = settings
        self.index = index
        self.transactional_id = settings.slice_transactional_id(index)
        self.group = settings.slice_group(index)
        self._producer: ConfluentProducer | None = None
        #: Whether the producer was kept from an earlier task of this slice in this worker.
        self._reused = False
        #: Whether the producer's last transaction ended cleanly (it may serve the next task).
        self._clean = False
        #: The output topic's partition ids, looked up by :meth:`open`.
        self.partitions: set[int] = set()

    def __enter__(self) -> SliceTransaction:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Keep a cleanly ended producer for the next task of this slice, close any other."""
        if self._producer is not None:
            if self._clean and self.settings.reuse_producers:
                _IDLE[self.transactional_id] = self._producer
            else:
                self._producer.close()
            self._producer = None

    def open(self) -> ConfluentProducer:
        """Run epoch checked, then ``init_transactions`` (the slice's other attempts fenced;
        skipped when this worker holds a producer of the slice that ended cleanly), then the
        topic's partitions."""
        if self._producer is None:
            KafkaCommitter(self.settings).check_run_epoch()
            s = self.settings
            idle = _IDLE.pop(self.transactional_id, None)
            if idle is not None:
                self._producer, self._reused = idle, True
                self.partitions = idle.partitions()
                return idle
            producer = ConfluentProducer(
                s.bootstrap,
                s.topic,
                self.transactional_id,
                s.transaction_timeout_ms,
                s.delivery_timeout_ms,
            )
            try:
                producer.init()
                self.partitions = producer.partitions()
            except SliceFenced as exc:
                producer.close()
                raise WriterFencedError(f"{self.transactional_id}: {exc}") from exc
            self._producer, self._reused = producer, False
        return self._producer

    def _begin(self, batch_id: int) -> ConfluentProducer:
        """Open, then begin a transaction. A producer kept from an earlier task is probed
        first (an offset of the group ``<slice group>.probe`` added to the transaction: the
        coordinator checks the epoch; nothing read yet): another Python worker
        may have initialised the slice since (Spark runs a slice's tasks wherever it likes),
        which fenced this one; then a fresh producer is initialised in its place."""
        producer = self.open()
        producer.begin()
        if self._reused:
            try:
                producer.probe(self.settings.names.probe_group(self.index), batch_id, PROBE)
            except SliceFenced:
                # Not aborted: a fenced producer's abort always fails, and the init that
                # fenced it already ended its transactions (this one holds nothing yet).
                log.info("%s slice %d: kept producer fenced, initialising", self.group, self.index)
                self._clean = False
                self.close()
                producer = self.open()
                producer.begin()
        return producer

    def recorded(self) -> SliceRecord | None:
        """The batch this slice last committed (read after :meth:`open`, so stable)."""
        from kafka import KafkaConsumer, TopicPartition

        consumer = KafkaConsumer(
            bootstrap_servers=self.settings.bootstrap,
            group_id=self.group,
            enable_auto_commit=False,
            isolation_level="read_committed",
        )
        try:
            got = consumer.committed(TopicPartition(self.settings.topic, 0), metadata=True)
        finally:
            consumer.close()
        if got is None:
            return None
        return SliceRecord.parse(self.settings.sink_id, got.metadata, self.settings.owner)

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
                if rows.values:
                    header = (RECORD_ID_HEADER, rows.names)
                    producer.send_many(rows.values, rows.keys, rows.partitions, header)
                    sent += len(rows.values)
            producer.flush(s.sink_id, batch_id)
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
        """A task of the batch recorded when this run started (Spark re-runs it: its commit
        log entry was not written) writes nothing, however Spark slices it now; a task of a
        batch below it is :class:`BatchRegressionError`."""
        recorded = self.settings.recorded
        if recorded is not None and batch_id < recorded:
            raise BatchRegressionError(self.settings.sink_id, batch_id, recorded)
        rows = sum(b.num_rows for b in batches)
        log.info(
            "%s batch %d slice %d: recorded, skipped", self.settings.sink_id, batch_id, self.index
        )
        return SliceWritten(self.index, batch_id, rows, "", skipped=True)

    def _written_before(self, batch_id: int) -> set[bytes]:
        """The record ids of ``batch_id`` committed before this run started, if the start
        found some of its slices committed (:func:`replay_state`); read after ``init`` fenced
        the slice's other attempts, and only committed transactions count."""
        s = self.settings
        if s.partial != batch_id:
            return set()
        found = written_ids(
            s.bootstrap,
            s.topic,
            s.replay_from or None,
            record_id(s.sink_id, batch_id, ""),
            s.sink_id,
            batch_id,
            read_committed=True,
        )
        log.info(
            "%s batch %d slice %d: %d records of the batch committed before this start",
            s.sink_id,
            batch_id,
            self.index,
            len(found),
        )
        return {rid.encode() for rid in found}

    def _check_partitions(self, wanted: list[int | None]) -> None:
        """:class:`PartitionOutOfRangeError` if a row names a partition the topic lacks."""
        missing = sorted(p for p in set(wanted) - self.partitions if p is not None)
        if missing:
            raise PartitionOutOfRangeError(self.settings.topic, missing[0], self.partitions)

    def _abort_quietly(self, batch_id: int) -> None:
        """Abort the open transaction; if that fails too, the next ``init_transactions`` of
        this slice (a retried attempt, a replay, :func:`recover_slices`) aborts it."""
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


class KafkaSliceWriter(DataSourceStreamArrowWriter):
    """Each task produces its slice in its own transaction; the driver records the batch."""

    def __init__(self, settings: KafkaSinkSettings, schema: StructType) -> None:
        self.settings = settings
        self.schema = schema

    def write(self, iterator: Iterator[pa.RecordBatch]) -> SliceWritten:
        index, _attempt = task_attempt()
        batch_id = current_batch_id()
        batches = (b for b in iterator if b.num_rows)
        first = next(batches, None)
        if first is None:
            return SliceWritten(index, batch_id, 0, SliceDigest().value, skipped=False)
        with SliceTransaction(self.settings, index) as tx:
            return tx.write(batch_id, chain([first], batches))

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


#: The driver's committer of each run, by (transactional id, run epoch), kept between the
#: batches this process records: ``init_transactions`` costs ~0.3 s. A newer start fences the
#: kept producer (its next commit fails, :meth:`KafkaCommitter.record_progress`); a committer
#: whose call failed is dropped.
_RECORDERS: dict[tuple[str, int | None], KafkaCommitter] = {}


def record_batch(settings: KafkaSinkSettings, batch_id: int, written: list[SliceWritten]) -> None:
    """Step 4 (driver): record ``batch_id`` once every slice of it is committed (a replay of
    the recorded batch records nothing; a lower id raises :class:`BatchRegressionError`).

    In a transaction of the driver's transactional id (:meth:`KafkaCommitter.producer`
    checks the run epoch before and after initialising it), after the record was read: a
    start after that fences the producer and the commit fails (:meth:`KafkaCommitter.fenced`),
    so an older driver's late commit never moves the record back. PySpark runs a data
    source's commit in whichever Python worker of the driver is free, so a producer kept in
    one worker is fenced by another worker's of the same run: that one is replaced and the
    step done again, from the read.
    """
    key = (settings.transactional_id, settings.run_epoch)
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
        progress = committer.progress
        recorded = progress.read()
        check_still_owner(progress, recorded, settings.owner)
        if check_batch_order(settings.sink_id, batch_id, recorded.batch_id if recorded else None):
            return committer
        used = max((m.index + 1 for m in written), default=0)
        slices = max(recorded.slices if recorded else 0, used)
        # every slice of the batch is committed: the next batch's records all lie above these
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
        check_columns(schema)
        check_columns(schema, require_record_id=True)
        return KafkaSliceWriter(KafkaSinkSettings.from_options(self.options), schema)


def lingering_slices(settings: KafkaSinkSettings) -> list[str]:
    """Transactional ids of this sink's slices with a transaction not yet complete."""
    from kafka import KafkaAdminClient

    admin = KafkaAdminClient(bootstrap_servers=settings.bootstrap)
    try:
        # Ongoing: a task killed mid-transaction; Prepare*: a commit or abort the coordinator
        # is still completing -- its slice record is not readable yet, and the start must
        # read it (init_transactions waits for the completion)
        listed = admin.list_transactions(state_filters=["Ongoing", "PrepareCommit", "PrepareAbort"])
    finally:
        admin.close()
    names = settings.names
    return sorted(
        t.transactional_id
        for rows in listed.values()
        for t in rows
        if names.slice_of_transactional_id(t.transactional_id) is not None
    )


def committed_slices(settings: KafkaSinkSettings) -> dict[int, SliceRecord]:
    """Every slice record of this sink on its topic, by slice index (groups found by name)."""
    from kafka import KafkaAdminClient, TopicPartition

    names = settings.names
    admin = KafkaAdminClient(bootstrap_servers=settings.bootstrap)
    try:
        slices = {
            g["group_id"]: index
            for g in admin.list_groups()
            if (index := names.slice_of_group(g["group_id"])) is not None
        }
        groups = list(slices)
        tp = TopicPartition(settings.topic, 0)
        got = admin.list_group_offsets({g: [tp] for g in groups}) if groups else {}
    finally:
        admin.close()
    records = {}
    for group, offsets in got.items():
        found = offsets.get(tp)
        record = (
            SliceRecord.parse(settings.sink_id, found.metadata, settings.owner) if found else None
        )
        if record is not None:
            records[slices[group]] = record
    return records


def replay_state(settings: KafkaSinkSettings) -> KafkaSinkSettings:
    """What a start hands its tasks about the batches Spark may re-run first.

    The recorded batch (its commit reached step 4 but not Spark's commit log): its tasks write
    nothing. The batch after it, if some of its slices are committed (its commit never
    reached step 4): its tasks read back the record ids already committed, from the end
    offsets recorded with the batch before, and write the rest; how the batch is sliced now
    does not matter (issue #24, N1). Slice records of any other batch above the recorded one
    cannot come from this query's checkpoint: :class:`ProgressInconsistentError`.
    """
    recorded = SinkProgress(settings.bootstrap, settings.topic, settings.sink_id).read()
    batch = recorded.batch_id if recorded is not None else None
    ahead = sorted(
        {
            r.batch_id
            for r in committed_slices(settings).values()
            if batch is None or r.batch_id > batch
        }
    )
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
    """At start: check the owner (another query's sink is :class:`SinkOwnerError` unless
    ``take_over``), fence older drivers (a new run epoch), record the owner, abort this sink's
    open slice transactions, find the recorded and a partly committed batch
    (:func:`replay_state`); returns the settings to hand to this start's writers."""
    from kafka import KafkaProducer

    committer = KafkaCommitter(settings)
    try:
        committer.recover(fence=True, take_over=take_over)
        epoch = committer.started_epoch
    finally:
        committer.close()
    for transactional_id in lingering_slices(settings):
        producer = KafkaProducer(
            bootstrap_servers=settings.bootstrap, **settings.producer_config(transactional_id)
        )
        try:
            producer.init_transactions()  # aborts the open transaction
            log.warning(
                "%s: aborted the open transaction of %s", settings.sink_id, transactional_id
            )
        finally:
            producer.close(timeout=10)
    state = replay_state(settings)
    if state.partial is not None:
        log.warning(
            "%s: batch %d is partly committed; its re-run writes only the records not in %s",
            settings.sink_id,
            state.partial,
            settings.topic,
        )
    return dataclasses.replace(state, run_epoch=epoch)
