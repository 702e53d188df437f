"""The producer the Kafka sinks' tasks write with: confluent-kafka (why: docs/design.md, "Kafka
sinks"). A fence (or a broker abort for age) is :class:`SliceFenced`, an undelivered record
:class:`~spark_ext.sinks.errors.ProduceFailedError` at flush."""

from __future__ import annotations

import logging
import threading
from typing import Any

from connectors.kafka.records import (
    LINGER_MS,
    PRODUCER,
    RECORD_ID_HEADER,
    STALL_GRACE_S,
    NamedRows,
    bounded,
    call_timeout_s,
)
from connectors.kafka.settings import KafkaSinkSettings
from spark_ext import kafka_clients
from spark_ext.sinks.errors import ClientStalledError, ProduceFailedError, TopicMissingError

__all__ = ["ConfluentProducer", "SliceFenced"]

LIBRDKAFKA_LOG = logging.getLogger("connectors.librdkafka")
#: librdkafka group metadata by (bootstrap, group) (:meth:`ConfluentProducer._group_metadata`).
_GROUP_METADATA: dict[tuple[str, str], Any] = {}


class SliceFenced(Exception):
    """Internal: the producer was fenced (or its transaction aborted by the broker)."""


class _ProducerLog:
    """librdkafka's log lines into :data:`LIBRDKAFKA_LOG`; at INFO while a fence is expected."""

    def __init__(self) -> None:
        self.fence_expected = False

    def log(self, level: int, msg: str, *args: object) -> None:
        if self.fence_expected:
            level = min(level, logging.INFO)
        LIBRDKAFKA_LOG.log(level, msg, *args)


class ConfluentProducer:
    """A producer for one task: transactional, or idempotent without transactions
    (``transactional_id=None``)."""

    def __init__(self, settings: KafkaSinkSettings, transactional_id: str | None) -> None:
        from confluent_kafka import Producer

        s = settings
        self.bootstrap, self.topic, self.sink_id = s.bootstrap, s.topic, s.sink_id
        self.log = _ProducerLog()
        self.timeout_s = call_timeout_s(s.delivery_timeout_ms)
        txn: dict[str, Any] = (
            {
                "transactional.id": transactional_id,
                "transaction.timeout.ms": s.transaction_timeout_ms,
                # librdkafka refuses a message timeout above the transaction timeout
                "message.timeout.ms": min(s.delivery_timeout_ms, s.transaction_timeout_ms),
            }
            if transactional_id
            else {"message.timeout.ms": s.delivery_timeout_ms}
        )
        self.producer = Producer(
            kafka_clients.confluent_config(
                self.bootstrap,
                {
                    **txn,
                    "enable.idempotence": True,
                    "acks": "all",
                    "linger.ms": LINGER_MS,
                    "batch.size": PRODUCER["batch_size"],
                    "partitioner": "murmur2_random",  # the Java client's (and Spark's)
                    # only failed records' reports reach _on_delivery (a callback per record
                    # halved the produce rate)
                    "on_delivery": self._on_delivery,
                    "delivery.report.only.error": True,
                    "logger": self.log,  # librdkafka's log lines into logging, not stderr
                },
            )
        )
        self.transactional_id = transactional_id
        #: A call of this producer was given up (:func:`bounded`): it is dropped, never
        #: aborted, closed or kept (each would wait behind the stalled call).
        self.stalled: ClientStalledError | None = None
        self._lock = threading.Lock()
        self.failed = 0
        self.failed_partitions: set[int] = set()
        self.first: object = None

    def _on_delivery(self, err: Any, msg: Any) -> None:
        if err is not None:
            with self._lock:
                self.failed += 1
                if msg is not None and msg.partition() is not None and msg.partition() >= 0:
                    self.failed_partitions.add(msg.partition())
                if self.first is None:
                    self.first = err

    @staticmethod
    def _is_fenced(err: Any) -> bool:
        from confluent_kafka import KafkaError

        fenced = (KafkaError._FENCED, KafkaError.PRODUCER_FENCED, KafkaError.INVALID_PRODUCER_EPOCH)
        return isinstance(err, KafkaError) and err.code() in fenced

    def _raise(self, exc: Exception) -> None:
        """Re-raise a ``KafkaException`` as :class:`SliceFenced` when it means fenced."""
        from confluent_kafka import KafkaException

        err = exc.args[0] if isinstance(exc, KafkaException) and exc.args else None
        if self._is_fenced(err):
            raise SliceFenced(str(err)) from exc
        if isinstance(exc, SystemError):
            # confluent-kafka 2.16: a producer in librdkafka's fatal state (fenced) returns
            # NULL from flush without an exception; the transaction is lost either way
            raise SliceFenced(f"producer in a fatal state: {exc}") from exc
        raise exc

    def init(self) -> None:
        try:
            self.producer.init_transactions(self.timeout_s)
        except Exception as exc:
            self._raise(exc)

    def partitions(self) -> set[int]:
        meta = self.producer.list_topics(self.topic, timeout=self.timeout_s)
        found = meta.topics.get(self.topic)
        if found is None or found.error is not None:
            raise TopicMissingError(self.topic, "output")
        return set(found.partitions)

    def begin(self) -> None:
        self.failed, self.failed_partitions, self.first = 0, set(), None
        self.producer.begin_transaction()

    def send(self, key: bytes | None, value: bytes | None, partition: int | None) -> None:
        # -1: librdkafka's "no partition given" (RD_KAFKA_PARTITION_UA), its partitioner decides
        self._produce(value, key, -1 if partition is None else partition, None)

    def _produce(
        self,
        value: bytes | None,
        key: bytes | None,
        partition: int,
        headers: list[tuple[str, str | bytes | None]] | None,
    ) -> None:
        """Produce one record, waiting for room in the local queue if it is full."""
        while True:
            try:
                self.producer.produce(self.topic, value, key, partition, headers=headers)
                return
            except BufferError:  # the local queue is full: serve callbacks, then retry
                self.producer.poll(0.05)
            except Exception as exc:
                self._raise(exc)

    def send_rows(self, rows: NamedRows) -> None:
        """Produce every row with its record id as header ``spark_ext.record_id``."""
        produce, topic = self.producer.produce, self.topic
        parts = rows.partitions or [None] * len(rows.values)
        for value, key, part, name in zip(rows.values, rows.keys, parts, rows.names, strict=True):
            headers: list[tuple[str, str | bytes | None]] = [(RECORD_ID_HEADER, name)]
            part = -1 if part is None else part
            try:
                produce(topic, value, key, part, headers=headers)
            except Exception:  # BufferError (queue full) or a client error
                self._produce(value, key, part, headers)

    def flush(self, batch_id: int) -> None:
        try:
            left = self.producer.flush(self.timeout_s)
        except Exception as exc:
            self._raise(exc)
        with self._lock:
            failed = self.failed + left
            first = self.first if self.first is not None else f"{left} still queued"
        if failed:
            error = ProduceFailedError(
                self.sink_id, batch_id, failed, self.failed_partitions, first
            )
            if self._is_fenced(self.first):
                raise SliceFenced(str(self.first)) from error
            raise error

    def _group_metadata(self, group: str) -> Any:
        """librdkafka's group metadata for ``group`` (group id only), made once per process
        and group."""
        from confluent_kafka import Consumer

        key = (self.bootstrap, group)
        if key not in _GROUP_METADATA:
            consumer = Consumer(kafka_clients.confluent_config(self.bootstrap, {"group.id": group}))
            try:
                _GROUP_METADATA[key] = consumer.consumer_group_metadata()
            finally:
                consumer.close()
        return _GROUP_METADATA[key]

    def offsets(self, group: str, offset: int, metadata: str) -> None:
        """Add ``group``'s committed offset on partition 0 to the open transaction (the
        coordinator checks the producer's epoch: :class:`SliceFenced` if it is stale)."""
        from confluent_kafka import TopicPartition

        positions = [TopicPartition(self.topic, 0, offset, metadata=metadata)]
        group_metadata = self._group_metadata(group)
        try:
            # A deadline of ours: librdkafka may ignore this call's timeout (docs/design.md,
            # "Kafka sinks": a stalled coordinator)
            bounded(
                lambda: self.producer.send_offsets_to_transaction(
                    positions, group_metadata, self.timeout_s
                ),
                f"adding {group}'s offset to transaction {self.transactional_id}",
                self.timeout_s + STALL_GRACE_S,
            )
        except ClientStalledError as exc:
            self.stalled = exc
            raise
        except Exception as exc:
            self._raise(exc)

    def probe(self, group: str, offset: int, metadata: str) -> None:
        """:meth:`offsets`, where being fenced is an expected answer (its librdkafka lines
        logged at INFO)."""
        self.log.fence_expected = True
        try:
            self.offsets(group, offset, metadata)
        except BaseException as exc:
            # fenced, the expected answer: quiet while the producer is closed
            self.log.fence_expected = isinstance(exc, SliceFenced)
            raise
        self.log.fence_expected = False

    def commit(self, group: str, offset: int, metadata: str) -> None:
        self.offsets(group, offset, metadata)
        try:
            self.producer.commit_transaction(self.timeout_s)
        except Exception as exc:
            self._raise(exc)

    def abort(self) -> None:
        if self.stalled is not None:  # it would queue behind the call that stalled
            raise self.stalled
        self.producer.abort_transaction(self.timeout_s)

    def close(self) -> None:
        """Release the producer; a producer in a fatal state (fenced) raises on close, which
        must not hide the error that put it there."""
        from confluent_kafka import KafkaException

        if self.stalled is not None:
            LIBRDKAFKA_LOG.warning(
                "dropping stalled producer %s; the next init of its id fences it",
                self.transactional_id,
            )
            return
        try:
            self.producer.close()
        except KafkaException as exc:
            LIBRDKAFKA_LOG.info("closing a failed producer: %s", exc)
