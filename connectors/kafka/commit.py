"""The two-phase Kafka sink on the driver: steps 2-4 of one batch, in ONE Kafka transaction.

See :mod:`connectors.kafka.sink` for the protocol and what consumers see. This module holds
:class:`KafkaCommitter` (run by :func:`spark_ext.sinks.protocol.commit_batch`), the run epoch
that fences older drivers, and the retry rules of step 3 (lost answer, fenced writer, expired
transaction, undelivered record).
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import time
from collections.abc import Sequence
from typing import Any

from connectors.kafka.delivery import DeliveryCheck
from connectors.kafka.owner import check_progress_owner, check_still_owner, record_owner
from connectors.kafka.progress import SinkProgress
from connectors.kafka.records import bounded, client_deadline_s, existing_topics
from connectors.kafka.settings import KafkaSinkSettings, StagedRecords, staged_records
from spark_ext.crash import declare
from spark_ext.sinks.errors import (
    ClientStalledError,
    CommitUncertainError,
    DriverFencedError,
    PartitionOutOfRangeError,
    ProduceFailedError,
    SinkError,
    SinkOwnerError,
    StagedDataMissingError,
    TopicMissingError,
    TransactionExpiredError,
    TransactionTimeoutError,
    WriterFencedError,
)
from spark_ext.sinks.owner import SinkOwner
from spark_ext.sinks.protocol import KAFKA_TWO_PHASE, Protocol, TwoPhaseCommitter

__all__ = [
    "FENCED",
    "FENCED_OR_WRITER",
    "IN_TRANSACTION",
    "KafkaCommitter",
    "broker_max_transaction_timeout_ms",
    "send_offsets",
    "topic_partitions",
]

log = logging.getLogger(__name__)

#: Inside step 3: every record of the batch is flushed into the open transaction, which is
#: neither recorded nor committed yet (``sleep`` here pushes the transaction past its timeout).
IN_TRANSACTION = declare(
    "kafka2pc.in_transaction", "driver", "records flushed into the open transaction, not committed"
)


# -- two-phase: steps 2-4 on the driver ---------------------------------------------------
def _fenced_errors() -> tuple[type[BaseException], ...]:
    from kafka.errors import InvalidProducerEpochError, ProducerFencedError

    return (ProducerFencedError, InvalidProducerEpochError)


#: kafka-python errors that mean "another producer with this transactional id took over".
FENCED = _fenced_errors()
#: Fenced, as kafka-python reports it or as this sink re-raised it.
FENCED_OR_WRITER: tuple[type[BaseException], ...] = (*FENCED, WriterFencedError)


def send_offsets(
    producer: Any,
    offsets: dict[Any, Any],
    group: str,
    bootstrap: str,
    topic: str,
    deadline_s: float,
) -> None:
    """kafka-python's ``send_offsets_to_transaction`` under a deadline (it has no timeout).

    For a topic deleted after the start checked it the broker answers
    ``UNKNOWN_TOPIC_OR_PARTITION`` and the client retries without end (issue #24, N9: a
    start waited forever). Past ``deadline_s``: :class:`TopicMissingError` naming ``topic`` if
    it is gone, else :class:`ClientStalledError`; the caller drops the producer either way.
    """
    try:
        bounded(
            lambda: producer.send_offsets_to_transaction(offsets, group),
            f"adding {group}'s offsets on {topic} to a transaction",
            deadline_s,
        )
    except ClientStalledError:
        if topic not in existing_topics(bootstrap):
            raise TopicMissingError(topic, "output") from None
        raise


def topic_partitions(producer: Any, topic: str) -> set[int]:
    """The partition ids of ``topic`` (from the producer's metadata)."""
    from kafka.errors import KafkaTimeoutError

    try:
        return set(producer.partitions_for(topic) or ())
    except KafkaTimeoutError as exc:
        raise TopicMissingError(topic, "output") from exc


def broker_max_transaction_timeout_ms(bootstrap: str) -> int:
    """The smallest ``transaction.max.timeout.ms`` of the cluster's brokers."""
    from kafka import KafkaAdminClient
    from kafka.admin import ConfigResource, ConfigResourceType

    key = "transaction.max.timeout.ms"
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        brokers = [str(b["broker_id"]) for b in admin.describe_cluster()["brokers"]]
        got = admin.describe_configs(
            [ConfigResource(ConfigResourceType.BROKER, b, configs={key: None}) for b in brokers],
            config_filter="all",
        )
    finally:
        admin.close()
    return min(int(cfg[key]["value"]) for cfg in got["broker"].values())


class KafkaCommitter(TwoPhaseCommitter[StagedRecords]):
    """Driver side of the two-phase Kafka sink: one transaction per batch."""

    protocol: Protocol = KAFKA_TWO_PHASE

    def __init__(self, settings: KafkaSinkSettings) -> None:
        self.settings = settings
        self.sink_id = settings.sink_id
        self.progress = SinkProgress(settings.bootstrap, settings.topic, settings.sink_id)
        #: The group whose committed offset on partition 0 is the latest run epoch.
        self.run_group = settings.names.run_group
        #: The run epoch :meth:`recover` recorded with ``fence=True`` (else ``None``).
        self.started_epoch: int | None = None
        self._producer: Any = None

    def producer(self) -> Any:
        """The transactional producer, initialised: zombies fenced, old transaction settled.

        A driver whose run epoch is older than the recorded one is refused *before*
        ``init_transactions`` (:class:`DriverFencedError`), so an old driver still running
        never fences the live one's transaction, and again *after* it: a start between the
        two checks recorded its epoch after this producer was initialised (or failed, fenced
        by it), and a commit of this producer would write over what that start's driver
        records (issue #24, suspicion (b)).
        """
        if self._producer is None:
            from kafka import KafkaProducer

            self.check_run_epoch()
            s = self.settings
            producer = KafkaProducer(bootstrap_servers=s.bootstrap, **s.producer_config())
            # kafka-python reports a timeout above the broker's maximum as a plain KafkaError;
            # recover() checks the maximum first, so that case fails at start-up, typed.
            producer.init_transactions()
            try:
                self.check_run_epoch()
            except BaseException:
                producer.close(timeout=10)
                raise
            self._producer = producer
        return self._producer

    def close(self) -> None:
        if self._producer is not None:
            self._producer.close(timeout=10)
            self._producer = None

    def last_committed_batch(self) -> int | None:
        self.producer()  # settle a transaction a killed driver left before reading
        recorded = self.progress.read()
        check_still_owner(self.progress, recorded, self.settings.owner)
        return recorded.batch_id if recorded else None

    def commit_staged(self, batch_id: int, messages: Sequence[StagedRecords]) -> None:
        """Step 3, retried where that is safe.

        * outcome unknown (a lost answer): settle with a fresh producer, read the recorded
          batch back, retry only if it was not recorded;
        * fenced while the transaction was younger than ``transaction_timeout_ms``: another
          driver took over, :class:`WriterFencedError`, never retried;
        * fenced after ``transaction_timeout_ms`` (K5): the broker aborted the expired
          transaction; retried once in a fresh one, then :class:`TransactionExpiredError`
          naming the setting.
        """
        from kafka.errors import KafkaError

        for m in messages:
            if not os.path.exists(m.path):
                raise StagedDataMissingError(
                    f"staged records {m.path} of batch {batch_id} are gone"
                )
        timeout_ms = self.settings.transaction_timeout_ms
        expired = 0
        for attempt in range(1, self.settings.max_attempts + 1):
            started = time.monotonic()
            try:
                rows = self._transaction(batch_id, messages)
                log.info("%s batch %d: committed %d records", self.sink_id, batch_id, rows)
                return
            except FENCED_OR_WRITER as exc:
                elapsed_ms = int((time.monotonic() - started) * 1000)
                if elapsed_ms < timeout_ms:
                    raise WriterFencedError(
                        f"{self.settings.transactional_id} was fenced by a newer producer"
                    ) from exc
                expired += 1
                self.close()  # the next attempt initialises a fresh producer
                if expired > 1:
                    raise TransactionExpiredError(
                        self.sink_id, batch_id, elapsed_ms, timeout_ms
                    ) from exc
                log.warning(
                    "%s batch %d: transaction expired after %d ms (timeout %d ms); retrying",
                    self.sink_id,
                    batch_id,
                    elapsed_ms,
                    timeout_ms,
                )
            except KafkaError as exc:
                log.warning("%s batch %d: commit outcome unknown (%r)", self.sink_id, batch_id, exc)
                if self._learn_outcome(batch_id):
                    return
                log.warning("%s batch %d: aborted, retry %d", self.sink_id, batch_id, attempt)
        raise CommitUncertainError(f"batch {batch_id} not committed after {attempt} attempts")

    def _transaction(self, batch_id: int, messages: Sequence[StagedRecords]) -> int:
        """One transaction: every staged record, then the progress offset, then commit.

        Every produce future is checked after ``flush()`` and before anything is recorded
        (K1): kafka-python would commit a transaction whose records expired. A failed record
        or a row naming a partition the topic lacks aborts the transaction and raises.
        """
        producer = self.producer()
        topic = self.settings.topic
        partitions = topic_partitions(producer, topic)
        check = DeliveryCheck()
        producer.begin_transaction()
        rows = 0
        try:
            for m in messages:
                for key, value, partition in staged_records(m.path):
                    if partition is not None and partition not in partitions:
                        raise PartitionOutOfRangeError(topic, partition, partitions)
                    check.watch(producer.send(topic, key=key, value=value, partition=partition))
                    rows += 1
            producer.flush()
            check.raise_if_failed(self.sink_id, batch_id)
            IN_TRANSACTION.reached(batch_id)
        except (ProduceFailedError, PartitionOutOfRangeError) as exc:
            self._abort_open_transaction(batch_id)
            if isinstance(getattr(exc, "cause", None), FENCED):
                raise WriterFencedError(
                    f"{self.settings.transactional_id} was fenced by a newer producer"
                ) from exc
            raise
        progress = self.progress.offsets(batch_id, owner=self.settings.owner)
        self._send_offsets(progress, self.progress.group)
        producer.commit_transaction()
        return rows

    def _send_offsets(self, offsets: dict[Any, Any], group: str) -> None:
        """:func:`send_offsets` of the driver's producer, dropped if the call did not end."""
        s = self.settings
        try:
            deadline = client_deadline_s(s.delivery_timeout_ms)
            send_offsets(self._producer, offsets, group, s.bootstrap, s.topic, deadline)
        except (ClientStalledError, TopicMissingError):
            self._producer = None  # its call waits on: never closed, never reused
            raise

    def _abort_open_transaction(self, batch_id: int) -> None:
        """Abort the open transaction; if even that fails, drop the producer (the next
        ``init_transactions`` with this transactional id aborts it)."""
        from kafka.errors import KafkaError

        try:
            self._producer.abort_transaction()
            log.warning("%s batch %d: transaction aborted", self.sink_id, batch_id)
        except KafkaError as exc:
            log.warning(
                "%s batch %d: abort failed (%r); producer dropped", self.sink_id, batch_id, exc
            )
            self.close()

    def _learn_outcome(self, batch_id: int) -> bool:
        """After a lost answer: settle the transaction with a fresh producer, then look."""
        from kafka.errors import KafkaError

        try:
            if self._producer is not None:
                self._producer.close(timeout=1)
        except KafkaError:
            pass
        self._producer = None
        try:
            last = self.last_committed_batch()
        except KafkaError as exc:
            raise CommitUncertainError(f"batch {batch_id}: outcome unknown: {exc!r}") from exc
        return last is not None and last >= batch_id

    def clean(self, batch_id: int, messages: Sequence[StagedRecords], committed: bool) -> None:
        shutil.rmtree(self.settings.batch_dir(batch_id), ignore_errors=True)

    def _run_epoch_offset(self) -> Any:
        from kafka import TopicPartition

        return TopicPartition(self.settings.topic, 0)

    def recorded_run(self) -> tuple[int, str | None] | None:
        """The run epoch the latest start of this sink recorded and its owner (``None``
        before any start)."""
        from kafka import KafkaConsumer

        consumer = KafkaConsumer(
            bootstrap_servers=self.settings.bootstrap,
            group_id=self.run_group,
            enable_auto_commit=False,
            isolation_level="read_committed",
        )
        try:
            got = consumer.committed(self._run_epoch_offset(), metadata=True)
        finally:
            consumer.close()
        if got is None:
            return None
        meta = json.loads(got.metadata) if got.metadata else {}
        return int(got.offset), meta.get("owner")

    def recorded_run_epoch(self) -> int | None:
        """The run epoch the latest start of this sink recorded (``None`` before any)."""
        run = self.recorded_run()
        return None if run is None else run[0]

    def fenced(self) -> SinkError:
        """The error of a driver whose producer was fenced: by a newer start of another query
        (:class:`SinkOwnerError`) or of this one (:class:`DriverFencedError`), or, the run
        epoch unchanged, by another producer of this run (:class:`WriterFencedError`: another
        Python worker of this driver initialised the transactional id since)."""
        run = self.recorded_run()
        current, owner = run if run is not None else (-1, None)
        ours = self.settings.owner
        if owner is not None and ours is not None and owner != ours:
            return SinkOwnerError(self.settings.topic, self.sink_id, owner, ours)
        mine = self.settings.run_epoch
        if mine is not None and current != mine:
            return DriverFencedError(self.settings.topic, self.sink_id, mine, current)
        return WriterFencedError(
            f"{self.settings.transactional_id} was fenced by another producer of this run"
        )

    def record_progress(self, batch_id: int, end_offsets: dict[int, int], slices: int) -> None:
        """Record ``batch_id`` (sliced sink, step 4) in a transaction of the driver's
        transactional id, after :meth:`producer` checked the run epoch and initialised it and
        the caller read the record: a newer start's ``init_transactions`` fences this
        producer, so an older driver's late commit fails instead of moving the record back
        (issue #24, suspicion (b)); :meth:`fenced` says why."""
        producer = self.producer()
        producer.begin_transaction()
        try:
            offsets = self.progress.offsets(batch_id, end_offsets, slices, self.settings.owner)
            self._send_offsets(offsets, self.progress.group)
            producer.commit_transaction()
        except FENCED as exc:
            self._producer = None  # fenced: its abort and close would fail too
            raise self.fenced() from exc

    def check_run_epoch(self) -> None:
        """:class:`DriverFencedError` if a newer start of this sink recorded another run epoch;
        :class:`SinkOwnerError` if that start was another query's (the sink was handed over)."""
        mine = self.settings.run_epoch
        if mine is None:
            return
        run = self.recorded_run()
        if run is None or run[0] == mine:
            return
        current, owner = run
        ours = self.settings.owner
        if owner is not None and ours is not None and owner != ours:
            raise SinkOwnerError(self.settings.topic, self.sink_id, owner, ours)
        raise DriverFencedError(self.settings.topic, self.sink_id, mine, current)

    def start_run(self) -> int:
        """Fence every older driver of this sink and record a new run epoch; returns it."""
        from kafka.structs import OffsetAndMetadata

        producer = self.producer()  # init_transactions: older producers fenced first
        epoch = (self.recorded_run_epoch() or 0) + 1
        run = {"sink": self.sink_id, "run": epoch}
        meta = json.dumps(
            run if self.settings.owner is None else {**run, "owner": self.settings.owner}
        )
        producer.begin_transaction()
        self._send_offsets(
            {self._run_epoch_offset(): OffsetAndMetadata(epoch, meta, -1)}, self.run_group
        )
        producer.commit_transaction()
        log.info("%s: run epoch %d recorded", self.sink_id, epoch)
        return epoch

    def recover(self, fence: bool = False, staging: bool = True, take_over: bool = False) -> None:
        """At start: fail fast on a bad transaction timeout or another owner, fence zombies,
        record the owner, drop old staging.

        The owner (:attr:`KafkaSinkSettings.owner`, if set) is checked before anything is
        fenced or written (:mod:`connectors.kafka.owner`; another query's sink is
        :class:`SinkOwnerError` unless ``take_over``) and recorded once older drivers are
        fenced. With ``fence``, a new run epoch is recorded first (:attr:`started_epoch`): pass
        it to this start's committers (:attr:`KafkaSinkSettings.run_epoch`).
        ``staging=False``: the sink stages nothing (one transaction per task slice).
        """
        s = self.settings
        limit = broker_max_transaction_timeout_ms(s.bootstrap)
        if s.transaction_timeout_ms > limit:
            raise TransactionTimeoutError(
                "transaction_timeout_ms",
                f"{s.transaction_timeout_ms} is above the broker's transaction.max.timeout.ms "
                f"({limit}); the broker would refuse every transaction",
            )
        owner = SinkOwner(s.owner) if s.owner is not None else None
        decision = (
            check_progress_owner(self.progress, owner, take_over=take_over) if owner else None
        )
        if fence:
            self.started_epoch = self.start_run()
        self.producer()
        if owner is not None and decision is not None:
            record_owner(self.progress, owner, decision)
        if not staging:
            return
        folder = self.settings.sink_dir()
        if os.path.isdir(folder) and os.listdir(folder):
            log.warning("%s: removing staged batches of an earlier run", self.sink_id)
            shutil.rmtree(folder, ignore_errors=True)
