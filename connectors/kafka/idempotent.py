"""The idempotent Kafka sink (``foreachBatch``): tasks produce without transactions, every record
carries the header ``spark_ext.record_id`` = ``<sink id>/<batch id>/<record_id>`` (also its key
when it has none); a replay re-sends only records not in the topic (model, claims, lost attempts:
docs/design.md, "Kafka sinks"). Steps of :data:`~spark_ext.sinks.protocol.KAFKA_IDEMPOTENT`:

1. ``before_write`` (driver): recorded batch read (equal: replay skipped; lower:
   ``BatchRegressionError``); where the batch's records can start and whether any lie beyond;
2. ``partial`` (task, a fault point only): the first record acknowledged, the rest not;
3. ``written`` (driver): every record acknowledged (``ProduceFailedError``);
4. ``marked`` (driver): batch id and every partition's end offset recorded.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import time
import uuid
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from pyspark.sql import DataFrame

from connectors.kafka.producer import ConfluentProducer
from connectors.kafka.progress import Recorded, SinkProgress, commit_offsets
from connectors.kafka.readback import (
    assigned_consumer,
    check_not_trimmed,
    end_offsets,
    record_id,
    written_ids,
)
from connectors.kafka.records import RECORD_ID_COLUMN, NamedRows, arrow_rows, check_columns
from connectors.kafka.settings import KafkaSinkSettings
from spark_ext import kafka_clients
from spark_ext.sinks.errors import SinkConfigError, WriterFencedError
from spark_ext.sinks.owner import SinkOwner, owner_of
from spark_ext.sinks.protocol import KAFKA_IDEMPOTENT, Protocol
from spark_ext.sinks.task import task_attempt

__all__ = [
    "IN_FLIGHT_GRACE_S",
    "PARTIAL",
    "Claim",
    "KafkaIdempotentWriter",
    "OutputRegion",
    "Record",
    "SliceWriter",
    "TaskStarted",
    "check_no_speculation",
    "output_region",
    "partition_identity",
]

log = logging.getLogger(__name__)

#: Step 2: a task's first record is acknowledged, the rest is not.
PARTIAL = KAFKA_IDEMPOTENT.fault(2)
Record = tuple[bytes | None, bytes | None, int | None]


def partition_identity(records: Iterable[Record]) -> str:
    """A name for a task's slice of rows without a ``record_id`` column, independent of the
    task's index (two slices with identical records share it: docs/design.md, "Kafka sinks")."""
    digest = hashlib.blake2b(digest_size=8)
    for key, value, part in records:
        for field in (key, value):
            digest.update(
                len(field).to_bytes(4, "big") + field if field is not None else b"\xff" * 4
            )
        digest.update(str(part).encode())
    return digest.hexdigest()


@dataclass(frozen=True)
class OutputRegion:
    """Where the records of a batch can be: from ``since`` (per partition) on; ``dirty``:
    records lie beyond it (an earlier run wrote part of the batch, or others write)."""

    since: dict[int, int]
    dirty: bool


def output_region(
    settings: KafkaSinkSettings, batch_id: int, recorded: Recorded | None
) -> OutputRegion:
    """Step 1's look at the topic: where batch ``batch_id`` can start, and if it did (K4)."""
    consumer, parts = assigned_consumer(settings.bootstrap, settings.topic)
    try:
        begin = {tp.partition: o for tp, o in consumer.beginning_offsets(parts).items()}
        end = {tp.partition: o for tp, o in consumer.end_offsets(parts).items()}
    finally:
        consumer.close()
    if recorded is None:
        since = begin  # no batch recorded yet: the batch can only be after the log start
    else:
        since = {p: recorded.end_offsets.get(p, 0) for p in begin}
        check_not_trimmed(settings.sink_id, batch_id, since, begin)
    return OutputRegion(since, any(end[p] > since[p] for p in end))


#: Added to the delivery timeout a task waits for a lost attempt before it reads back.
IN_FLIGHT_GRACE_S = 5.0


@dataclass(frozen=True)
class Claim:
    """Who writes a task's slice of a batch: the attempt holding ``token`` of driver run ``run``;
    ``ended``: that attempt stopped and sends nothing more."""

    batch_id: int
    run: str
    token: str
    ended: bool = False

    @classmethod
    def parse(cls, sink_id: str, batch_id: int, metadata: str | None) -> Claim | None:
        try:
            meta = json.loads(metadata or "")
        except ValueError:
            return None
        if not isinstance(meta, dict) or meta.get("sink") != sink_id:
            return None
        return cls(
            batch_id, str(meta.get("run", "")), str(meta.get("token", "")), bool(meta.get("ended"))
        )


class TaskStarted:
    """A task's durable claim of its slice: group ``settings.names.task_group``'s offset
    on partition 0 (batch, metadata :class:`Claim`; docs/design.md, "Kafka sinks")."""

    def __init__(self, settings: KafkaSinkSettings, index: int) -> None:
        self.settings = settings
        self.group = settings.names.task_group(index)
        self._reader: Any = None

    def read(self) -> Claim | None:
        """The slice's claim (one consumer kept for the repeated checks of one attempt)."""
        from kafka import TopicPartition

        s = self.settings
        if self._reader is None:
            self._reader = kafka_clients.consumer(
                s.bootstrap, group_id=self.group, enable_auto_commit=False
            )
        got = self._reader.committed(TopicPartition(s.topic, 0), metadata=True)
        return None if got is None else Claim.parse(s.sink_id, got.offset, got.metadata)

    def write(self, claim: Claim) -> None:
        from kafka import TopicPartition
        from kafka.structs import OffsetAndMetadata

        s = self.settings
        fields = {"run": claim.run, "token": claim.token, "ended": claim.ended}
        meta = json.dumps({"sink": s.sink_id, **fields})
        offset = OffsetAndMetadata(claim.batch_id, meta, -1)
        commit_offsets(s.bootstrap, self.group, {TopicPartition(s.topic, 0): offset})

    def holds(self, claim: Claim) -> bool:
        """Whether ``claim`` is still the slice's (no newer attempt claimed it)."""
        now = self.read()
        return now is not None and (now.batch_id, now.token) == (claim.batch_id, claim.token)

    def end(self, claim: Claim) -> None:
        """Mark ``claim`` ended (its attempt sends nothing more) if it is still the slice's."""
        if self.holds(claim):
            self.write(dataclasses.replace(claim, ended=True))

    def close(self) -> None:
        if self._reader is not None:
            self._reader.close()
            self._reader = None


@dataclass(frozen=True)
class SliceWriter:
    """What each task of an idempotent batch runs (``mapInArrow``); ``run``: the driver run of
    the batch (an unended claim of the same run may be a lost attempt still running)."""

    settings: KafkaSinkSettings  # carries the cluster's client properties to the task
    batch_id: int
    region: OutputRegion
    run: str = ""

    @property
    def sink_id(self) -> str:
        return self.settings.sink_id

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        index, attempt = task_attempt()
        skip: set[bytes] = set()
        marker = TaskStarted(self.settings, index)
        try:
            before = marker.read()
            claim = Claim(self.batch_id, self.run, uuid.uuid4().hex)
            marker.write(claim)  # durable before the first record is sent
            # K2: read back in the task, not on the driver; a task of a re-attempted stage
            # starts at attempt 0 again, so the claim of its batch tells it it ran before.
            ran_before = attempt > 0 or (before is not None and before.batch_id == self.batch_id)
            if before is not None and (before.batch_id, before.run) == (self.batch_id, self.run):
                self._await_lost_attempt(index, before)
            if self.region.dirty or ran_before:
                skip = written_ids(self.settings, self.batch_id, self.region.since)
            sent = self._write(batches, marker, claim, skip)
        finally:
            marker.close()
        yield pa.RecordBatch.from_pydict({"sent": pa.array([sent], pa.int64())})

    def _await_lost_attempt(self, index: int, before: Claim) -> None:
        """Wait out a lost attempt's deliveries if ``before`` (this run's) never ended."""
        if before.ended:
            return
        wait_s = self.settings.delivery_timeout_ms / 1000 + IN_FLIGHT_GRACE_S
        log.warning(
            "%s batch %d task %d: an earlier attempt may still be running; reading back in %.0f s",
            self.sink_id,
            self.batch_id,
            index,
            wait_s,
        )
        time.sleep(wait_s)

    def _write(
        self,
        batches: Iterator[pa.RecordBatch],
        marker: TaskStarted,
        claim: Claim,
        skipped: set[bytes],
    ) -> int:
        """Produce every row not in ``skipped``; stop if a newer attempt claims the slice."""
        producer = ConfluentProducer(self.settings, None)
        sent = 0
        try:
            for rows in self._named(batches):
                if not marker.holds(claim):
                    raise WriterFencedError(
                        f"{marker.group}: batch {self.batch_id} claimed by a newer attempt "
                        "(this one ran on an executor Spark declared lost); it stops"
                    )
                if skipped:
                    rows = rows.without(skipped)
                if not rows.values:
                    continue
                if sent == 0 and PARTIAL.armed(self.batch_id):
                    # only a fault here needs the first record durable before the rest
                    producer.send_rows(rows.head())
                    producer.flush(self.batch_id)
                    # 2. partial: the first record is in the topic, the rest is not.
                    PARTIAL.reached(self.batch_id)
                    sent, rows = 1, rows.tail()
                producer.send_rows(rows)
                sent += len(rows.values)
            producer.flush(self.batch_id)  # every delivery checked (K1)
        finally:
            producer.close()
            marker.end(claim)
        return sent

    def _named(self, batches: Iterable[pa.RecordBatch]) -> Iterator[NamedRows]:
        """The rows with their record ids, in order (without a ``record_id`` column the whole
        slice is read first and named by :func:`partition_identity`)."""
        it = iter(batches)
        first = next(it, None)
        if first is None:
            return
        prefix = record_id(self.sink_id, self.batch_id, "").encode()
        if RECORD_ID_COLUMN in first.schema.names:  # named by input coordinates: streamed
            yield NamedRows.of(first, prefix)
            for batch in it:
                yield NamedRows.of(batch, prefix)
            return
        records = [(k, v, p) for b in (first, *it) for k, v, p, _ in arrow_rows(b)]
        slice_name = partition_identity(records)
        names = [
            record_id(self.sink_id, self.batch_id, slice_name, seq).encode()
            for seq in range(len(records))
        ]
        yield NamedRows(
            [v for _, v, _ in records],
            [k if k is not None else n for (k, _, _), n in zip(records, names, strict=True)],
            [p for _, _, p in records],
            names,
        )


class KafkaIdempotentWriter:
    """``foreachBatch`` function writing each record once, recognised by its record id; options
    as for :class:`~connectors.kafka.sliced_writer.KafkaTwoPhaseWriter`.

    >>> df.writeStream.foreachBatch(KafkaIdempotentWriter(bootstrap, "out", "out_1"))  # doctest: +SKIP
    """

    protocol: Protocol = KAFKA_IDEMPOTENT

    def __init__(
        self,
        bootstrap: str,
        topic: str,
        sink_id: str,
        owner: SinkOwner | str | None = None,
        take_over: bool = False,
        delivery_timeout_ms: int = 120_000,
    ) -> None:
        self.settings = KafkaSinkSettings(
            bootstrap, topic, sink_id, delivery_timeout_ms=delivery_timeout_ms
        )
        self.progress = SinkProgress(bootstrap, topic, sink_id)
        self.owner = SinkOwner(owner) if isinstance(owner, str) else owner
        self.take_over = take_over
        self.run = uuid.uuid4().hex  # a task claim of another run is no live attempt of ours
        self._claimed: SinkOwner | None = None

    def claim(self, owner: SinkOwner) -> SinkOwner:
        """Check the sink's owner and record ``owner`` where needed (before any write)."""
        decision = self.progress.owner_decision(owner, take_over=self.take_over)
        self.progress.record_owner(owner, decision)
        self._claimed = owner
        return owner

    def __call__(self, df: DataFrame, batch_id: int) -> None:
        check_columns(df.schema)
        check_no_speculation(df)
        claimed = self._claimed or self.claim(owner_of(df, self.owner, "KafkaIdempotentWriter"))
        s = self.settings
        recorded, done = self.progress.check_still_owner(batch_id, claimed.query_id)
        if done:
            log.info("%s batch %d: already written, replay skipped", s.sink_id, batch_id)
            return
        region = output_region(s, batch_id, recorded)
        if region.dirty:
            log.warning(
                "%s batch %d: records beyond the recorded offsets; tasks read back",
                s.sink_id,
                batch_id,
            )
        # 1. before_write: the batch is known, where it can already be is known.
        self.protocol.reached(1, batch_id)
        writer = SliceWriter(self.settings, batch_id, region, self.run)
        # one row per task, summed here: no aggregation stage (and its shuffle) per batch
        sent = sum(row.sent for row in df.mapInArrow(writer, "sent long").collect())
        log.info("%s batch %d: %d records sent", s.sink_id, batch_id, sent)
        # 3. written: every record of the batch is acknowledged by the broker.
        self.protocol.reached(3, batch_id)
        self.progress.record(batch_id, end_offsets(s.bootstrap, s.topic), owner=claimed.query_id)
        # 4. marked: the batch id is recorded; Spark's commit log comes next.
        self.protocol.reached(4, batch_id)


def check_no_speculation(df: DataFrame) -> None:
    """:class:`SinkConfigError` if ``spark.speculation`` is on."""
    value = df.sparkSession.conf.get("spark.speculation", "false") or "false"
    if value.strip().lower() == "true":
        raise SinkConfigError(
            "spark.speculation",
            "the idempotent Kafka sink cannot fence two attempts of a task writing at once; "
            "turn speculation off or use mode='two_phase'",
        )
