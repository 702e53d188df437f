"""The end-event streaming source ``spark_ext_tracker``: one row per end event, offsets are
the agent's sequence numbers, so a replayed batch reads the same events (docs/design.md,
"Tracker"). Options: ``agent`` (``local``, ``path``: read on the driver and shipped in the input
partition; ``kafka``, ``bootstrap``, ``ends_topic``) and ``namespaces`` (comma-separated).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pyspark.sql import SparkSession
from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.types import LongType, StringType, StructField, StructType

from spark_ext.tracker.agent import EndEvent, LocalTrackingAgent

if TYPE_CHECKING:
    from spark_ext.tracker.kafka_agent import KafkaEndLog

__all__ = ["FORMAT", "TrackerEndReader", "TrackerEndSource", "register"]

log = logging.getLogger(__name__)

FORMAT = "spark_ext_tracker"

END_EVENT_SCHEMA = StructType(
    [
        StructField("seq", LongType(), False),
        StructField("substream", StringType(), False),
        StructField("namespace", StringType(), False),
        StructField("start_ms", LongType(), False),
        StructField("end_ms", LongType(), False),
    ]
)


def register(spark: SparkSession) -> None:
    """Register the ``spark_ext_tracker`` format with ``spark`` (idempotent)."""
    spark.dataSource.register(TrackerEndSource)


@dataclass(frozen=True)
class SeqRange(InputPartition):
    """End events with ``after < seq <= up_to``; ``events``: read by the driver (a local agent)."""

    after: int
    up_to: int
    events: tuple[tuple[Any, ...], ...] | None = None


_LOCAL_AGENTS: dict[str, LocalTrackingAgent] = {}  # one per folder in the driver's process


def _local(path: str) -> LocalTrackingAgent:
    agent = _LOCAL_AGENTS.get(path)
    if agent is None:
        agent = _LOCAL_AGENTS[path] = LocalTrackingAgent(path)
    return agent


def _kafka(options: dict[str, str]) -> KafkaEndLog:
    from spark_ext.kafka_clients import KafkaAccess
    from spark_ext.tracker.kafka_agent import KafkaEndLog

    KafkaAccess.from_options(options["bootstrap"], options)  # the client properties, here too
    return KafkaEndLog.shared(options["bootstrap"], options["ends_topic"])


class TrackerEndSource(DataSource):
    """Streaming source of a tracking agent's end events."""

    @classmethod
    def name(cls) -> str:
        return FORMAT

    def schema(self) -> StructType:
        return END_EVENT_SCHEMA

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return TrackerEndReader(dict(self.options))


class TrackerEndReader(DataSourceStreamReader):
    """Reads end events by sequence-number range."""

    def __init__(self, options: dict[str, str]) -> None:
        self.options = options
        self.local = options.get("agent", "local") == "local"
        raw = options.get("namespaces", "")
        self.namespaces = frozenset(n for n in raw.split(",") if n)

    def initialOffset(self) -> dict[str, Any]:
        return {"seq": 0}

    def latestOffset(
        self, start: dict[str, Any] | None = None, limit: Any = None
    ) -> dict[str, Any]:
        agent = _local(self.options["path"]) if self.local else _kafka(self.options)
        seq = agent.last_seq()
        if start is not None:
            seq = max(seq, int(start["seq"]))
        return {"seq": seq}

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        after, up_to = int(start["seq"]), int(end["seq"])
        if up_to <= after:
            return []
        if not self.local:
            return [SeqRange(after, up_to)]  # executors read the end-event topic
        # the local agent's files are on the driver's disk: read here, ship the rows
        events = _local(self.options["path"]).end_events(after, up_to)
        return [SeqRange(after, up_to, self._rows(events))]

    def _rows(self, events: Iterable[EndEvent]) -> tuple[tuple[Any, ...], ...]:
        return tuple(
            (e.seq, e.substream, e.namespace, e.start_ms, e.end_ms)
            for e in events
            if not self.namespaces or e.namespace in self.namespaces
        )

    def read(self, partition: InputPartition) -> Iterator[tuple[Any, ...]]:
        assert isinstance(partition, SeqRange)
        if partition.events is not None:
            return iter(partition.events)
        return iter(self._rows(_kafka(self.options).events(partition.after, partition.up_to)))

    def commit(self, end: dict[str, Any]) -> None:
        log.debug("end events up to seq %s committed", end.get("seq"))
