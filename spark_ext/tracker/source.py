"""The end-event streaming source: offsets are the tracking agent's sequence numbers.

``spark.readStream.format("spark_ext_tracker")`` yields one row per end event
``(seq, substream, namespace, start_ms, end_ms)``. Its offset is ``{"seq": n}``: Spark writes
the range each micro-batch read into its offset log before running it, so a replayed batch
reads exactly the end events the first attempt read -- no more (events published since) and
no fewer.

Options
-------
agent
    ``local`` (a :class:`~spark_ext.tracker.agent.LocalTrackingAgent` folder) or ``kafka``
    (a :class:`~spark_ext.tracker.kafka_agent.KafkaTrackingAgent`'s end-event topic).
path
    The local agent's folder. Read on the driver only: each micro-batch's end events travel
    to the executors inside its input partition, so the folder need not be shared.
bootstrap, ends_topic
    The Kafka agent's broker and end-event topic.
namespaces
    Comma-separated namespaces to keep (default: all). Offsets stay global sequence numbers.

Example
-------
>>> register(spark)                                                     # doctest: +SKIP
>>> ends = spark.readStream.format("spark_ext_tracker").options(**agent.source_options()).load()  # doctest: +SKIP
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from pyspark.sql import SparkSession
from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.types import LongType, StringType, StructField, StructType

from spark_ext.tracker.agent import EndEvent, read_end_events

__all__ = [
    "END_EVENT_SCHEMA",
    "FORMAT",
    "SeqRange",
    "TrackerEndReader",
    "TrackerEndSource",
    "register",
]

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
    """End events with ``after < seq <= up_to``; ``events`` holds them when the driver read
    them already (a local agent: executors then need no access to its folder)."""

    after: int
    up_to: int
    events: tuple[tuple[Any, ...], ...] | None = None


_LOCAL_AGENTS: dict[str, Any] = {}  # one per folder in the driver-side reader process


def _last_seq(options: dict[str, str]) -> int:
    kind = options.get("agent", "local")
    if kind == "local":
        from spark_ext.tracker.agent import LocalTrackingAgent

        agent = _LOCAL_AGENTS.get(options["path"])
        if agent is None:
            agent = _LOCAL_AGENTS[options["path"]] = LocalTrackingAgent(options["path"])
        return agent.last_seq()
    from spark_ext.tracker.kafka_agent import KafkaEndLog

    return KafkaEndLog.shared(options["bootstrap"], options["ends_topic"]).last_seq()


def _events(options: dict[str, str], after: int, up_to: int) -> Iterator[EndEvent]:
    kind = options.get("agent", "local")
    if kind == "local":
        yield from read_end_events(options["path"], after, up_to)
        return
    from spark_ext.tracker.kafka_agent import KafkaEndLog

    yield from KafkaEndLog.shared(options["bootstrap"], options["ends_topic"]).events(after, up_to)


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
    """Reads end events by sequence-number range (see module docstring)."""

    def __init__(self, options: dict[str, str]) -> None:
        self.options = options
        raw = options.get("namespaces", "")
        self.namespaces = frozenset(n for n in raw.split(",") if n)

    def initialOffset(self) -> dict[str, Any]:
        return {"seq": 0}

    def latestOffset(
        self, start: dict[str, Any] | None = None, limit: Any = None
    ) -> dict[str, Any]:
        seq = _last_seq(self.options)
        if start is not None:
            seq = max(seq, int(start["seq"]))
        return {"seq": seq}

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        after, up_to = int(start["seq"]), int(end["seq"])
        if up_to <= after:
            return []
        if self.options.get("agent", "local") != "local":
            return [SeqRange(after, up_to)]  # executors read the end-event topic
        # The local agent's files are on the driver's disk: read them here (from the segment
        # holding ``after + 1``) and ship the rows with the partition.
        rows = tuple(self._row(e) for e in _events(self.options, after, up_to))
        return [SeqRange(after, up_to, tuple(r for r in rows if r is not None))]

    def _row(self, e: EndEvent) -> tuple[Any, ...] | None:
        ns = e.namespace
        if self.namespaces and ns not in self.namespaces:
            return None
        return (e.seq, e.substream, ns, e.start_ms, e.end_ms)

    def read(self, partition: InputPartition) -> Iterator[tuple[Any, ...]]:
        assert isinstance(partition, SeqRange)
        if partition.events is not None:
            yield from partition.events
            return
        for e in _events(self.options, partition.after, partition.up_to):
            row = self._row(e)
            if row is not None:
                yield row

    def commit(self, end: dict[str, Any]) -> None:
        log.debug("end events up to seq %s committed", end.get("seq"))
