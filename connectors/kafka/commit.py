"""The two-phase Kafka sink on the driver: the run epoch, the owner, and step 4's record,
with the driver's transactional producer (why: docs/design.md, "Kafka sinks")."""

from __future__ import annotations

__all__ = ["FENCED", "KafkaCommitter", "broker_max_transaction_timeout_ms"]

import json
import logging
from typing import Any

from kafka.errors import InvalidProducerEpochError, ProducerFencedError

from connectors.kafka.progress import SinkProgress, committed_offset
from connectors.kafka.records import bounded, client_deadline_s, existing_topics
from connectors.kafka.settings import KafkaSinkSettings
from spark_ext import kafka_clients
from spark_ext.sinks.errors import (
    ClientStalledError,
    DriverFencedError,
    SinkError,
    SinkOwnerError,
    TopicMissingError,
    TransactionTimeoutError,
    WriterFencedError,
)
from spark_ext.sinks.owner import SinkOwner

log = logging.getLogger(__name__)


#: kafka-python errors that mean "another producer with this transactional id took over".
FENCED = (ProducerFencedError, InvalidProducerEpochError)


def broker_max_transaction_timeout_ms(bootstrap: str) -> int:
    """The smallest ``transaction.max.timeout.ms`` of the cluster's brokers."""
    from kafka.admin import ConfigResource, ConfigResourceType

    key = "transaction.max.timeout.ms"
    with kafka_clients.admin(bootstrap) as admin:
        brokers = [str(b["broker_id"]) for b in admin.describe_cluster()["brokers"]]
        got = admin.describe_configs(
            [ConfigResource(ConfigResourceType.BROKER, b, configs={key: None}) for b in brokers],
            config_filter="all",
        )
    return min(int(cfg[key]["value"]) for cfg in got["broker"].values())


class KafkaCommitter:
    """Driver side of the two-phase Kafka sink: run epoch, owner, and the batch's record."""

    def __init__(self, settings: KafkaSinkSettings) -> None:
        self.settings = settings
        self.sink_id = settings.sink_id
        self.progress = SinkProgress(settings.bootstrap, settings.topic, settings.sink_id)
        #: The group whose committed offset on partition 0 is the latest run epoch.
        self.run_group = settings.names.run_group
        self._producer: Any = None

    def producer(self) -> Any:
        """The transactional producer, initialised; the run epoch is checked before and after
        ``init_transactions`` (:class:`DriverFencedError`; docs/design.md, "Kafka sinks")."""
        if self._producer is None:
            self.check_run_epoch()
            s = self.settings
            producer = kafka_clients.producer(s.bootstrap, **s.producer_config())
            # a timeout above the broker's maximum is a plain KafkaError: recover() checks it
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

    def send_offsets(self, offsets: dict[Any, Any], group: str) -> None:
        """``send_offsets_to_transaction`` under a deadline (docs/design.md, "Kafka sinks",
        N9): past it :class:`TopicMissingError` if the topic is gone, else
        :class:`ClientStalledError`, and the producer is dropped (never closed or reused)."""
        s, producer = self.settings, self._producer
        try:
            bounded(
                lambda: producer.send_offsets_to_transaction(offsets, group),
                f"adding {group}'s offsets on {s.topic} to a transaction",
                client_deadline_s(s.delivery_timeout_ms),
            )
        except ClientStalledError:
            self._producer = None
            if s.topic not in existing_topics(s.bootstrap):
                raise TopicMissingError(s.topic, "output") from None
            raise

    def recorded_run(self) -> tuple[int, str | None] | None:
        """The run epoch the latest start of this sink recorded and its owner (``None``
        before any start)."""
        got = committed_offset(self.settings.bootstrap, self.run_group, self.settings.topic)
        if got is None:
            return None
        meta = json.loads(got.metadata) if got.metadata else {}
        return int(got.offset), meta.get("owner")

    def _newer_start(self, run: tuple[int, str | None] | None) -> SinkError | None:
        """For the recorded ``run``: :class:`SinkOwnerError` if another query owns it,
        :class:`DriverFencedError` if it is not this driver's epoch."""
        current, owner = run if run is not None else (-1, None)
        ours, mine = self.settings.owner, self.settings.run_epoch
        if owner is not None and ours is not None and owner != ours:
            return SinkOwnerError(self.settings.topic, self.sink_id, owner, ours)
        if mine is not None and current != mine:
            return DriverFencedError(self.settings.topic, self.sink_id, mine, current)
        return None

    def fenced(self) -> SinkError:
        """The error of a driver whose producer was fenced: by a newer start, or by another
        Python worker of this run (:class:`WriterFencedError`)."""
        return self._newer_start(self.recorded_run()) or WriterFencedError(
            f"{self.settings.names.commit_id} was fenced by another producer of this run"
        )

    def record_progress(self, batch_id: int, end_offsets: dict[int, int], slices: int) -> None:
        """Record ``batch_id`` (step 4) in a transaction of the driver's transactional id; a
        newer start fences it, so a late commit fails (:meth:`fenced` says why)."""
        producer = self.producer()
        producer.begin_transaction()
        try:
            offsets = self.progress.offsets(batch_id, end_offsets, slices, self.settings.owner)
            self.send_offsets(offsets, self.progress.group)
            producer.commit_transaction()
        except FENCED as exc:
            self._producer = None  # fenced: its abort and close would fail too
            raise self.fenced() from exc

    def check_run_epoch(self) -> None:
        """:class:`DriverFencedError` (:class:`SinkOwnerError`: another query's) if a newer
        start of this sink recorded another run epoch."""
        mine = self.settings.run_epoch
        run = self.recorded_run() if mine is not None else None
        if run is not None and run[0] != mine and (error := self._newer_start(run)):
            raise error

    def start_run(self) -> int:
        """Fence every older driver of this sink and record a new run epoch; returns it."""
        from kafka import TopicPartition
        from kafka.structs import OffsetAndMetadata

        producer = self.producer()  # init_transactions: older producers fenced first
        epoch = ((self.recorded_run() or (0, None))[0]) + 1
        run = {"sink": self.sink_id, "run": epoch}
        meta = json.dumps(
            run if self.settings.owner is None else {**run, "owner": self.settings.owner}
        )
        producer.begin_transaction()
        self.send_offsets(
            {TopicPartition(self.settings.topic, 0): OffsetAndMetadata(epoch, meta, -1)},
            self.run_group,
        )
        producer.commit_transaction()
        log.info("%s: run epoch %d recorded", self.sink_id, epoch)
        return epoch

    def recover(self, take_over: bool = False) -> int:
        """At start: check the transaction timeout and the owner (before anything is written),
        fence older drivers with a new run epoch (returned), record the owner."""
        s = self.settings
        limit = broker_max_transaction_timeout_ms(s.bootstrap)
        if s.transaction_timeout_ms > limit:
            raise TransactionTimeoutError(
                "transaction_timeout_ms",
                f"{s.transaction_timeout_ms} is above the broker's transaction.max.timeout.ms "
                f"({limit}); the broker would refuse every transaction",
            )
        owner = SinkOwner(s.owner) if s.owner is not None else None
        decision = self.progress.owner_decision(owner, take_over=take_over) if owner else None
        epoch = self.start_run()
        if owner is not None and decision is not None:
            self.progress.record_owner(owner, decision)
        return epoch
