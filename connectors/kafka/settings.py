"""Typed settings of the Kafka sinks, validated when the query is built and passed to the
two-phase data source as string options (:meth:`KafkaSinkSettings.as_options`)."""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any

from connectors.kafka.names import KafkaSinkNames
from connectors.kafka.records import LINGER_MS, PRODUCER
from spark_ext import kafka_clients
from spark_ext.sinks.errors import SinkConfigError
from spark_ext.sinks.protocol import validate_sink_id

__all__ = ["KafkaSinkSettings"]

_INTEGERS = {"transaction_timeout_ms", "delivery_timeout_ms", "run_epoch", "recorded", "partial"}


@dataclass(frozen=True)
class KafkaSinkSettings:
    """Typed options of a Kafka sink (validated when the query is built; the idempotent sink
    uses the first five and ``access``)."""

    bootstrap: str
    topic: str
    sink_id: str
    transaction_timeout_ms: int = 300_000
    delivery_timeout_ms: int = 120_000
    #: This start's run epoch and the owner's query id (``None``: unchecked, outside a query).
    run_epoch: int | None = None
    owner: str | None = None
    #: What the start found (:func:`~connectors.kafka.slices.replay_state`): the recorded batch,
    #: the next batch if partly committed, and the offsets per partition its records lie from.
    recorded: int | None = None
    partial: int | None = None
    replay_from: dict[int, int] = field(default_factory=dict)
    #: The cluster's client properties (default: those configured for ``bootstrap``), carried
    #: to the tasks and the data source's options (docs/design.md, "Kafka clients").
    access: kafka_clients.KafkaAccess | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        if self.access is None:
            object.__setattr__(self, "access", kafka_clients.access(self.bootstrap))
        validate_sink_id(self.sink_id)
        if not self.topic:
            raise SinkConfigError("topic", "the output topic is required")
        if self.transaction_timeout_ms < 1000:
            raise SinkConfigError("transaction_timeout_ms", "must be at least 1000")
        if self.delivery_timeout_ms < 1000:
            raise SinkConfigError("delivery_timeout_ms", "must be at least 1000")

    def producer_config(self) -> dict[str, Any]:
        """kafka-python settings of the driver's transactional producer."""
        request_timeout = min(30_000, self.delivery_timeout_ms - LINGER_MS)
        return {
            **PRODUCER,
            "transactional_id": self.names.commit_id,
            "transaction_timeout_ms": self.transaction_timeout_ms,
            "delivery_timeout_ms": self.delivery_timeout_ms,
            "request_timeout_ms": request_timeout,
        }

    @property
    def names(self) -> KafkaSinkNames:
        """The sink's consumer groups and transactional ids (:mod:`connectors.kafka.names`)."""
        return KafkaSinkNames(self.sink_id, self.topic)

    def as_options(self) -> dict[str, str]:
        """The settings as the data source's string options (client properties as
        ``kafka.<property>``)."""
        options = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "access"}
        replay_from = ",".join(f"{p}:{o}" for p, o in sorted(self.replay_from.items()))
        options["replay_from"] = replay_from or None
        access = self.access.options() if self.access is not None else {}
        return {**{k: str(v) for k, v in options.items() if v is not None}, **access}

    @classmethod
    def from_options(cls, options: Any) -> KafkaSinkSettings:
        """Settings from :meth:`as_options`; their client properties are applied to this
        process (:meth:`~spark_ext.kafka_clients.KafkaAccess.from_options`)."""
        given: dict[str, Any] = {f.name: options[f.name] for f in fields(cls) if f.name in options}
        for name in _INTEGERS & set(given):
            try:
                given[name] = int(given[name])
            except ValueError as exc:
                raise SinkConfigError(name, "must be an integer") from exc
        pairs = (item.partition(":") for item in given.pop("replay_from", "").split(","))
        bootstrap = given.pop("bootstrap", "")
        return cls(
            **{"topic": "", "sink_id": "", **given},
            bootstrap=bootstrap,
            replay_from={int(p): int(o) for p, _, o in pairs if p},
            access=kafka_clients.KafkaAccess.from_options(bootstrap, options),
        )
