"""The producers the Kafka sinks' tasks write with: one interface, two clients.

:class:`~connectors.kafka.slices.SliceTransaction` (two-phase, a transaction per task) and
:class:`~connectors.kafka.idempotent.SliceWriter` (idempotent, no transactions) run their
protocols; a :class:`TaskProducer` carries the records. Two implementations:

* :class:`KafkaPythonProducer` -- kafka-python, the project's named client. Measured on this
  machine at 16-28k records/s per producer (a Python loop per record inside the client).
* :class:`ConfluentProducer` -- confluent-kafka (librdkafka): 110k+ records/s per producer in the
  same loop, which is what lets the sink reach Spark's own Kafka sink (issue #14's 0.9x target;
  the bench in ``scripts/benchmarks/sinks.py`` measures both). The default.

Both report the same three outcomes the protocol acts on: :class:`SliceFenced` (another
producer with the transactional id took over, or the broker aborted the transaction for age),
:class:`~spark_ext.sinks.errors.ProduceFailedError` (a record was not delivered: librdkafka
makes the transaction abortable, kafka-python does not -- K1 -- so both count failures in the
delivery callbacks and refuse to commit), and anything else as the client's own error.
Both partition keyed records with murmur2 like the Java client and Spark's Kafka sink.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from typing import Any, Literal, Protocol

from connectors.kafka.commit import FENCED, send_offsets
from connectors.kafka.delivery import DeliveryCheck
from connectors.kafka.records import (
    LINGER_MS,
    PRODUCER,
    STALL_GRACE_S,
    bounded,
    call_timeout_s,
    client_deadline_s,
)
from spark_ext.sinks.errors import (
    ClientStalledError,
    ProduceFailedError,
    SinkConfigError,
    TopicMissingError,
)

__all__ = [
    "CLIENTS",
    "Client",
    "ConfluentProducer",
    "KafkaPythonProducer",
    "SliceFenced",
    "TaskProducer",
    "bounded",
    "check_client",
    "client_deadline_s",
    "task_producer",
]

Client = Literal["confluent-kafka", "kafka-python"]
LIBRDKAFKA_LOG = logging.getLogger("connectors.librdkafka")
CLIENTS: tuple[str, ...] = ("confluent-kafka", "kafka-python")
#: librdkafka group metadata by (bootstrap, group) (:meth:`ConfluentProducer._group_metadata`).
_GROUP_METADATA: dict[tuple[str, str], Any] = {}


class SliceFenced(Exception):
    """Internal: the producer was fenced (or its transaction aborted by the broker)."""


class TaskProducer(Protocol):
    """A producer for one task (transactional unless made without a transactional id)."""

    def init(self) -> None: ...
    def partitions(self) -> set[int]: ...
    def begin(self) -> None: ...
    def send(
        self,
        key: bytes | None,
        value: bytes | None,
        partition: int | None,
        headers: list[tuple[str, bytes]] | None = None,
    ) -> None: ...
    def send_many(
        self,
        values: Sequence[bytes | None],
        keys: Sequence[bytes | None] | None = None,
        partitions: Sequence[int | None] | None = None,
        header: tuple[str, Sequence[bytes]] | None = None,
    ) -> None: ...
    def flush(self, sink_id: str, batch_id: int) -> None: ...
    def offsets(self, group: str, offset: int, metadata: str) -> None: ...
    def probe(self, group: str, offset: int, metadata: str) -> None: ...
    def commit(self, group: str, offset: int, metadata: str) -> None: ...
    def abort(self) -> None: ...
    def close(self) -> None: ...


def check_client(client: str) -> str:
    """``client`` if it is known and importable, else :class:`SinkConfigError` naming it."""
    if client not in CLIENTS:
        raise SinkConfigError("client", f"{client!r} is not one of {list(CLIENTS)}")
    if client == "confluent-kafka":
        try:
            import confluent_kafka  # noqa: F401
        except ImportError as exc:
            raise SinkConfigError(
                "client", "confluent-kafka is not installed; install it or use 'kafka-python'"
            ) from exc
    return client


def task_producer(
    client: str,
    *,
    bootstrap: str,
    topic: str,
    transactional_id: str | None,
    transaction_timeout_ms: int = 300_000,
    delivery_timeout_ms: int = 120_000,
) -> TaskProducer:
    """A :class:`TaskProducer` of ``client`` (``"confluent-kafka"`` or ``"kafka-python"``);
    ``transactional_id=None``: an idempotent producer without transactions."""
    cls = ConfluentProducer if check_client(client) == "confluent-kafka" else KafkaPythonProducer
    return cls(bootstrap, topic, transactional_id, transaction_timeout_ms, delivery_timeout_ms)


# -- kafka-python -------------------------------------------------------------------------
class KafkaPythonProducer:
    """:class:`TaskProducer` on kafka-python (every produce future watched: K1)."""

    def __init__(
        self,
        bootstrap: str,
        topic: str,
        transactional_id: str | None,
        transaction_timeout_ms: int,
        delivery_timeout_ms: int,
    ) -> None:
        from kafka import KafkaProducer

        self.bootstrap = bootstrap
        self.topic = topic
        self.deadline_s = client_deadline_s(delivery_timeout_ms)
        txn = (
            {"transactional_id": transactional_id, "transaction_timeout_ms": transaction_timeout_ms}
            if transactional_id
            else {}
        )
        self.producer = KafkaProducer(
            bootstrap_servers=bootstrap,
            **PRODUCER,
            **txn,
            delivery_timeout_ms=delivery_timeout_ms,
            request_timeout_ms=min(30_000, delivery_timeout_ms - LINGER_MS),
        )
        self.check = DeliveryCheck()
        #: A call of this producer was given up (:func:`send_offsets`): dropped, never aborted
        #: or closed (each would wait behind the call).
        self.stalled: Exception | None = None

    def init(self) -> None:
        self.producer.init_transactions()

    def partitions(self) -> set[int]:
        from kafka.errors import KafkaTimeoutError

        try:
            return set(self.producer.partitions_for(self.topic) or ())
        except KafkaTimeoutError as exc:
            raise TopicMissingError(self.topic, "output") from exc

    def begin(self) -> None:
        self.check = DeliveryCheck()
        self.producer.begin_transaction()

    def send(
        self,
        key: bytes | None,
        value: bytes | None,
        partition: int | None,
        headers: list[tuple[str, bytes]] | None = None,
    ) -> None:
        try:
            future = self.producer.send(
                self.topic, key=key, value=value, partition=partition, headers=headers
            )
        except FENCED as exc:
            raise SliceFenced(str(exc)) from exc
        self.check.watch(future)

    def send_many(
        self,
        values: Sequence[bytes | None],
        keys: Sequence[bytes | None] | None = None,
        partitions: Sequence[int | None] | None = None,
        header: tuple[str, Sequence[bytes]] | None = None,
    ) -> None:
        """:meth:`send` of every row (columns of equal length; ``header``: one header's name
        and its value for every row)."""
        n = len(values)
        names = [None] * n if header is None else [[(header[0], h)] for h in header[1]]
        for value, key, part, headers in zip(
            values,
            [None] * n if keys is None else keys,
            [None] * n if partitions is None else partitions,
            names,
            strict=True,
        ):
            self.send(key, value, part, headers)

    def flush(self, sink_id: str, batch_id: int) -> None:
        self.producer.flush()
        try:
            self.check.raise_if_failed(sink_id, batch_id)
        except ProduceFailedError as exc:
            if isinstance(exc.cause, FENCED):
                raise SliceFenced(repr(exc.cause)) from exc
            raise

    def offsets(self, group: str, offset: int, metadata: str) -> None:
        """Add ``group``'s committed offset on partition 0 to the open transaction (the
        coordinator checks the producer's epoch: :class:`SliceFenced` if it is stale)."""
        from kafka import TopicPartition
        from kafka.structs import OffsetAndMetadata

        offsets = {TopicPartition(self.topic, 0): OffsetAndMetadata(offset, metadata, -1)}
        try:
            send_offsets(self.producer, offsets, group, self.bootstrap, self.topic, self.deadline_s)
        except FENCED as exc:
            raise SliceFenced(str(exc)) from exc
        except (ClientStalledError, TopicMissingError) as exc:
            self.stalled = exc
            raise

    def probe(self, group: str, offset: int, metadata: str) -> None:
        """:meth:`offsets`, where being fenced is an expected answer (kafka-python still logs
        it at ERROR from its sender thread: the library's line, not this sink's)."""
        self.offsets(group, offset, metadata)

    def commit(self, group: str, offset: int, metadata: str) -> None:
        self.offsets(group, offset, metadata)
        try:
            self.producer.commit_transaction()
        except FENCED as exc:
            raise SliceFenced(str(exc)) from exc

    def abort(self) -> None:
        if self.stalled is not None:
            raise self.stalled
        self.producer.abort_transaction()

    def close(self) -> None:
        if self.stalled is None:
            self.producer.close(timeout=10)


# -- confluent-kafka ----------------------------------------------------------------------
class _ProducerLog:
    """librdkafka's log lines of one producer, into :data:`LIBRDKAFKA_LOG` (confluent-kafka
    calls ``log(level, fmt, *args)`` on the object given as ``logger``). While a fence is an
    expected answer (:meth:`ConfluentProducer.probe`), its error lines are logged at INFO."""

    def __init__(self) -> None:
        self.fence_expected = False

    def log(self, level: int, msg: str, *args: object) -> None:
        if self.fence_expected:
            level = min(level, logging.INFO)
        LIBRDKAFKA_LOG.log(level, msg, *args)


class ConfluentProducer:
    """:class:`TaskProducer` on confluent-kafka (librdkafka), the fast data path."""

    def __init__(
        self,
        bootstrap: str,
        topic: str,
        transactional_id: str | None,
        transaction_timeout_ms: int,
        delivery_timeout_ms: int,
    ) -> None:
        from confluent_kafka import Producer

        self.bootstrap = bootstrap
        self.topic = topic
        self.log = _ProducerLog()
        self.timeout_s = call_timeout_s(delivery_timeout_ms)
        txn: dict[str, Any] = (
            {
                "transactional.id": transactional_id,
                "transaction.timeout.ms": transaction_timeout_ms,
                # librdkafka refuses a message timeout above the transaction timeout
                "message.timeout.ms": min(delivery_timeout_ms, transaction_timeout_ms),
            }
            if transactional_id
            else {"message.timeout.ms": delivery_timeout_ms}
        )
        self.producer = Producer(
            {
                "bootstrap.servers": bootstrap,
                **txn,
                "enable.idempotence": True,
                "acks": "all",
                "linger.ms": LINGER_MS,
                "batch.size": PRODUCER["batch_size"],
                "partitioner": "murmur2_random",  # the Java client's (and Spark's) partitioner
                # every failed record's report reaches _on_delivery (counted, and flush refuses
                # the batch); a delivered one has nothing to check, so librdkafka does not
                # hand its report to Python (a callback per record halved the produce rate)
                "on_delivery": self._on_delivery,
                "delivery.report.only.error": True,
                "logger": self.log,  # librdkafka's log lines into logging, not stderr
            }
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

    def send(
        self,
        key: bytes | None,
        value: bytes | None,
        partition: int | None,
        headers: list[tuple[str, bytes]] | None = None,
    ) -> None:
        # librdkafka's "no partition given" (RD_KAFKA_PARTITION_UA): its partitioner decides
        part = -1 if partition is None else partition
        self._produce(value, key, part, list(headers) if headers else None)

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

    def send_many(
        self,
        values: Sequence[bytes | None],
        keys: Sequence[bytes | None] | None = None,
        partitions: Sequence[int | None] | None = None,
        header: tuple[str, Sequence[bytes]] | None = None,
    ) -> None:
        """Produce every row (columns of equal length; ``header``: one header's name and its
        value for every row). The loop calls the client directly (no call of :meth:`send`
        per row); a full queue or an error takes :meth:`_produce`'s path."""
        produce, topic = self.producer.produce, self.topic
        n = len(values)
        keys_ = [None] * n if keys is None else keys
        parts = [-1] * n if partitions is None else [-1 if p is None else p for p in partitions]
        if header is None:
            for value, key, part in zip(values, keys_, parts, strict=True):
                try:
                    produce(topic, value, key, part)
                except Exception:  # BufferError (queue full) or a client error
                    self._produce(value, key, part, None)
            return
        name, header_values = header
        for value, key, part, h in zip(values, keys_, parts, header_values, strict=True):
            try:
                produce(topic, value, key, part, headers=[(name, h)])
            except Exception:  # BufferError (queue full) or a client error
                self._produce(value, key, part, [(name, h)])

    def flush(self, sink_id: str, batch_id: int) -> None:
        try:
            left = self.producer.flush(self.timeout_s)
        except Exception as exc:
            self._raise(exc)
        with self._lock:
            failed = self.failed + left
            first = self.first if self.first is not None else f"{left} still queued"
        if failed:
            error = ProduceFailedError(sink_id, batch_id, failed, self.failed_partitions, first)
            if self._is_fenced(self.first):
                raise SliceFenced(str(self.first)) from error
            raise error

    def _group_metadata(self, group: str) -> Any:
        """librdkafka's group metadata for ``group`` (a consumer that never joins: the group
        id only, no generation or member), made once per process and group: a producer made
        after another worker fenced this one's predecessor does not pay for a consumer."""
        from confluent_kafka import Consumer

        key = (self.bootstrap, group)
        if key not in _GROUP_METADATA:
            consumer = Consumer({"bootstrap.servers": self.bootstrap, "group.id": group})
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
        """:meth:`offsets`, where being fenced is an expected answer: librdkafka's lines about
        it (``TXNERR``, ``FATAL``) are logged at INFO from then on (the producer is closed
        next), not as errors; any other outcome leaves its log as it was."""
        self.log.fence_expected = True
        try:
            self.offsets(group, offset, metadata)
        except SliceFenced:
            raise  # the expected answer: quiet while the producer is closed
        except BaseException:
            self.log.fence_expected = False
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
