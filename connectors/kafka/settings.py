"""Typed settings of the two-phase Kafka sink (a transaction per task slice).

Validated once when the query is built; passed to the data source as string options
(:meth:`KafkaSinkSettings.as_options`) and read back on the executors. No Kafka client here.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from connectors.kafka.names import KafkaSinkNames
from connectors.kafka.records import LINGER_MS, PRODUCER
from spark_ext.sinks.errors import SinkConfigError
from spark_ext.sinks.protocol import validate_sink_id

__all__ = ["KafkaSinkSettings"]


@dataclass(frozen=True)
class KafkaSinkSettings:
    """Typed options of the two-phase Kafka sink (validated when the query is built)."""

    bootstrap: str
    topic: str
    sink_id: str
    transaction_timeout_ms: int = 300_000
    #: How long a record may wait for its acknowledgement (librdkafka ``message.timeout.ms``).
    delivery_timeout_ms: int = 120_000
    #: The run epoch of this start of the query (:meth:`KafkaCommitter.recover` with
    #: ``fence=True``); ``None``: no run-epoch check (commits made outside a query).
    run_epoch: int | None = None
    #: The streaming query id that owns the sink (:mod:`connectors.kafka.owner`), checked
    #: against the progress record of every commit; ``None``: unchecked (commits made outside
    #: a query).
    owner: str | None = None
    #: What the start found (:func:`connectors.kafka.slices.replay_state`): the recorded batch,
    recorded: int | None = None
    #: the next batch if partly committed,
    partial: int | None = None
    #: and the offsets per output partition its records lie from.
    replay_from: dict[int, int] = field(default_factory=dict)
    #: Keep a slice's producer in the Python worker for the slice's next task.
    reuse_producers: bool = True

    def __post_init__(self) -> None:
        validate_sink_id(self.sink_id)
        if not self.topic:
            raise SinkConfigError("topic", "the output topic is required")
        if self.transaction_timeout_ms < 1000:
            raise SinkConfigError("transaction_timeout_ms", "must be at least 1000")
        if self.delivery_timeout_ms < 1000:
            raise SinkConfigError("delivery_timeout_ms", "must be at least 1000")

    def producer_config(self, transactional_id: str | None = None) -> dict[str, Any]:
        """kafka-python settings of a transactional producer (default: the driver's id)."""
        request_timeout = min(30_000, self.delivery_timeout_ms - LINGER_MS)
        return {
            **PRODUCER,
            "transactional_id": transactional_id or self.transactional_id,
            "transaction_timeout_ms": self.transaction_timeout_ms,
            "delivery_timeout_ms": self.delivery_timeout_ms,
            "request_timeout_ms": request_timeout,
        }

    @property
    def names(self) -> KafkaSinkNames:
        """The sink's consumer groups and transactional ids (:mod:`connectors.kafka.names`)."""
        return KafkaSinkNames(self.sink_id, self.topic)

    @property
    def transactional_id(self) -> str:
        """The driver's transactional id (:attr:`KafkaSinkNames.commit_id`)."""
        return self.names.commit_id

    def slice_transactional_id(self, index: int) -> str:
        """The transactional id of task slice ``index`` (:meth:`KafkaSinkNames.slice_id`: one
        transaction per task; a retried or speculative attempt fences the other)."""
        return self.names.slice_id(index)

    def slice_group(self, index: int) -> str:
        """The group recording what slice ``index`` committed last
        (:meth:`KafkaSinkNames.slice_group`)."""
        return self.names.slice_group(index)

    def as_options(self) -> dict[str, str]:
        return {
            "bootstrap": self.bootstrap,
            "topic": self.topic,
            "sink_id": self.sink_id,
            "transaction_timeout_ms": str(self.transaction_timeout_ms),
            "delivery_timeout_ms": str(self.delivery_timeout_ms),
            **({"run_epoch": str(self.run_epoch)} if self.run_epoch is not None else {}),
            **({"owner": self.owner} if self.owner is not None else {}),
            **({"recorded": str(self.recorded)} if self.recorded is not None else {}),
            **({"partial": str(self.partial)} if self.partial is not None else {}),
            **(
                {"replay_from": ",".join(f"{p}:{o}" for p, o in sorted(self.replay_from.items()))}
                if self.replay_from
                else {}
            ),
        }

    @classmethod
    def from_options(cls, options: Any) -> KafkaSinkSettings:
        timeouts: dict[str, int] = {}
        for name, default in (
            ("transaction_timeout_ms", 300_000),
            ("delivery_timeout_ms", 120_000),
        ):
            try:
                timeouts[name] = int(options.get(name, default))
            except ValueError as exc:
                raise SinkConfigError(name, "must be an integer") from exc

        def number(name: str) -> int | None:
            value = options.get(name)
            return int(value) if value is not None else None

        replay_from = dict(
            (int(p), int(o))
            for p, _, o in (
                item.partition(":") for item in options.get("replay_from", "").split(",")
            )
            if p
        )
        return cls(
            bootstrap=options.get("bootstrap", ""),
            topic=options.get("topic", ""),
            sink_id=options.get("sink_id", ""),
            run_epoch=number("run_epoch"),
            owner=options.get("owner"),
            recorded=number("recorded"),
            partial=number("partial"),
            replay_from=replay_from,
            transaction_timeout_ms=timeouts["transaction_timeout_ms"],
            delivery_timeout_ms=timeouts["delivery_timeout_ms"],
        )
