"""Window a stream and close it by the tracker: the Spark plan around an operator (gate keyed by
source partition, operator stage keyed by shard, ``foreachBatch``; docs/design.md, "Tracked
queries"). Example: README.md, "Substream end without watermarks".
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields, is_dataclass
from typing import Any

from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.streaming import StreamingQuery
from pyspark.sql.types import DataType, StructField, StructType, TimestampType

from spark_ext.errors import ConfigError
from spark_ext.operators.base import SubstreamOperator
from spark_ext.sinks.trigger import Trigger
from spark_ext.streaming.checks import (
    check_agent_and_checkpoint,
    check_layout,
    check_partitions,
    checkpoint_shuffle_partitions,
)
from spark_ext.streaming.driver import DriverHandler, check_path
from spark_ext.streaming.envelope import (
    ALL_SUBSTREAMS,
    ENVELOPE_FIELDS,
    KIND_END,
    RESULT_ENVELOPE,
    StageConfig,
)
from spark_ext.streaming.handler import BatchHandler, Writer, as_callable
from spark_ext.streaming.idle import IdlePolicy
from spark_ext.streaming.placement import shard_keys
from spark_ext.streaming.stages import GateProcessor, OperatorProcessor
from spark_ext.tracker.agent import TrackingAgent
from spark_ext.tracker.source import FORMAT, register
from spark_ext.tracker.substreams import Windowing, duration_ms

__all__ = ["Closing", "TrackedQuery", "TrackedStream", "windowing_layout"]


@dataclass(frozen=True)
class Closing:
    """What closes a substream at its source: the ``topic:partition`` sources (none: an upstream
    query closes them) and their allowed disorder (0: ordered; None: close markers only)."""

    sources: tuple[str, ...] = ()
    disorder_ms: int | None = None

    @classmethod
    def partitions(
        cls,
        topic: str,
        partitions: int,
        ordered: bool = True,
        disorder: int | str | None = None,
    ) -> Closing:
        """Every partition of ``topic``, closed by markers and by event time minus ``disorder``
        (e.g. ``"3 seconds"``; without it 0, or markers only with ``ordered=False``)."""
        if partitions <= 0:
            raise ConfigError("Closing.partitions", f"must be positive, got {partitions}")
        d: int | None
        if disorder is not None:
            d = 0 if disorder in (0, "0") else duration_ms(disorder, "Closing.disorder")
        else:
            d = 0 if ordered else None
        return cls(tuple(f"{topic}:{p}" for p in range(partitions)), d)

    @classmethod
    def upstream(cls) -> Closing:
        """Substreams are closed by the upstream query that forwards them (through Kafka)."""
        return cls()


@dataclass
class TrackedStream:
    """A stream whose elements are labelled, assigned to substreams and reported: ``df`` has
    ``topic``, ``partition``, ``offset``, the ``key`` and ``event_time`` (timestamp or ms) and the
    operator's input columns; ``close_marker`` is non-null on marker rows only; ``side``: joins;
    ``upstream``: rows of :func:`~spark_ext.streaming.handler.forward_records` (``fwd_*``)."""

    df: DataFrame
    key: str
    event_time: str
    agent: TrackingAgent
    closing: Closing
    close_marker: str | None = None
    side: str | None = None
    upstream: bool = False

    def apply(
        self,
        windowing: Windowing,
        operator: SubstreamOperator,
        name: str | None = None,
        shards: int = 2,
    ) -> TrackedQuery:
        """Run ``operator`` over the substreams of ``windowing``; returns a startable query."""
        if shards <= 0:
            raise ConfigError("shards", f"must be positive, got {shards}")
        return TrackedQuery(self, windowing, operator, name or windowing.namespace, shards)


def windowing_layout(w: Windowing) -> str:
    """``w`` as a canonical string (``"10 seconds"`` and ``10000`` name one size)."""
    values: dict[str, Any] = (
        {f.name: getattr(w, f.name) for f in fields(w)} if is_dataclass(w) else {}
    )
    parts = [
        f"{k}={duration_ms(v) if k in ('size', 'slide') else v!r}"
        for k, v in sorted(values.items())
    ]
    return f"{type(w).__name__}({', '.join(parts)})"


def _ms(col: str, dtype: DataType) -> Any:
    if isinstance(dtype, TimestampType):
        return F.unix_millis(F.col(col))
    return F.col(col).cast("long")


@dataclass
class TrackedQuery:
    """The query of one tracked operator; :meth:`start` it with a writer."""

    stream: TrackedStream
    windowing: Windowing
    operator: SubstreamOperator
    name: str
    shards: int
    forward_namespace: str | None = None
    #: The driver's per-batch handler once started (its ``figures`` and ``late_rows``).
    handler: BatchHandler | None = None

    def forward_to(self, namespace: str) -> TrackedQuery:
        """Report results as sent into ``namespace`` of a downstream query and close it there."""
        self.forward_namespace = namespace
        return self

    # -- plan ---------------------------------------------------------------------------------
    def _input(self) -> DataFrame:
        s = self.stream
        types = {f.name: f.dataType for f in s.df.schema}
        needed = ["topic", "partition", "offset", s.key, s.event_time, *self.operator.input_columns]
        if s.upstream:
            needed += ["fwd_substream", "fwd_label"]
        for c in needed:
            if c not in types:
                raise ConfigError("TrackedStream.df", f"column {c!r} missing (has {sorted(types)})")
        self.operator.bind(s.df.schema)
        cols = [
            F.col(s.key).cast("string").alias("_key"),
            _ms(s.event_time, types[s.event_time]).alias("_t"),
            F.col("topic").cast("string").alias("_topic"),
            F.col("partition").cast("long").alias("_partition"),
            F.col("offset").cast("long").alias("_offset"),
            (
                _ms(s.close_marker, types[s.close_marker])
                if s.close_marker
                else F.lit(None).cast("long")
            ).alias("_close"),
            (F.col(s.side).cast("string") if s.side else F.lit("")).alias("_side"),
            (F.col("fwd_substream") if s.upstream else F.lit(None).cast("string")).alias(
                "_fwd_substream"
            ),
            (F.col("fwd_label").cast("long") if s.upstream else F.lit(None).cast("long")).alias(
                "_fwd_label"
            ),
        ]
        cols += [F.col(c) for c in self.operator.input_columns]
        return s.df.select(*cols)

    def _output_schema(self) -> StructType:
        taken = {f.name for f in RESULT_ENVELOPE} & set(self.operator.output_schema.names)
        if taken:
            raise ConfigError(
                f"{type(self.operator).__name__}.output_schema",
                f"columns {sorted(taken)} are the pipeline's own; rename them",
            )
        return StructType(RESULT_ENVELOPE + list(self.operator.output_schema.fields))

    def shard_keys(self, checkpoint: str | None = None) -> list[int]:
        """Each shard's group key for the checkpoint's (or the session's) shuffle partitions."""
        spark = self.stream.df.sparkSession
        partitions = checkpoint_shuffle_partitions(checkpoint) if checkpoint else None
        if partitions is None:
            partitions = int(spark.conf.get("spark.sql.shuffle.partitions") or 200)
        return shard_keys(self.shards, partitions)

    def _config(self) -> StageConfig:
        """The gate's and the shards' configuration (after :meth:`_input` bound the operator)."""
        closing = self.stream.closing
        return StageConfig(
            self.operator,
            self.windowing,
            self.shards,
            closing.disorder_ms,
            frozenset(closing.sources),
            self.stream.upstream,
            self.forward_namespace,
        )

    def plan(self, keys: list[int]) -> DataFrame:
        """The streaming DataFrame of operator output (results, late and report rows)."""
        prepared = self._input()
        inputs = [StructField(c, prepared.schema[c].dataType) for c in self.operator.input_columns]
        envelope = StructType(ENVELOPE_FIELDS + inputs)
        output = self._output_schema()
        cfg = self._config()
        gate = GateProcessor(cfg, prepared.columns, [f.name for f in envelope])
        data = prepared.groupBy("_topic", "_partition").transformWithStateInPandas(
            gate, envelope, "append", "none"
        )
        union = data
        if not self.stream.closing.sources:  # substreams closed by an upstream query
            union = data.unionByName(self._end_events(envelope))
        # a label on every row: a null makes the column float64 (docs/design.md)
        union = union.withColumn("label", F.coalesce(F.col("label"), F.lit(0).cast("long")))
        # the logical shard -> its key, placed in shuffle partition ``shard mod P``
        keyed = union.withColumn(
            "shard", F.element_at(F.array(*[F.lit(k) for k in keys]), F.col("shard") + 1)
        )
        return keyed.groupBy("shard").transformWithStateInPandas(
            OperatorProcessor(cfg, keyed.columns, keys), output, "append", "none"
        )

    def _end_events(self, envelope: StructType) -> DataFrame:
        """The agent's end events of the namespace, one ``end`` row per shard."""
        spark = self.stream.df.sparkSession
        register(spark)
        ends = (
            spark.readStream.format(FORMAT)
            .options(**self.stream.agent.source_options())
            .option("namespaces", self.windowing.namespace)
            .load()
        )
        nulls = {f.name: F.lit(None).cast(f.dataType) for f in envelope}
        nulls.update(
            substream=(
                F.col("substream") if self.operator.per_substream else F.lit(ALL_SUBSTREAMS)
            ),
            shard=F.explode(F.sequence(F.lit(0), F.lit(self.shards - 1))),
            kind=F.lit(KIND_END),
            tracked=F.col("substream"),
            start_ms=F.col("start_ms"),
            end_ms=F.col("end_ms"),
            label=F.col("seq"),
        )
        return ends.select(*[c.alias(n) for n, c in nulls.items()])

    def start(
        self,
        sink: Writer,
        checkpoint: str,
        late: Writer | None = None,
        trigger: Trigger | dict[str, Any] | None = None,
        topic_partitions: Mapping[str, int] | None = None,
        idle: IdlePolicy | None = None,
        path: str = "distributed",
        max_open_keys: int = 1_000_000,
    ) -> StreamingQuery:
        """Run the start-up checks (``topic_partitions``: each topic's partition count), declare
        the namespace and start the query writing results to ``sink`` and late rows
        (:data:`~spark_ext.streaming.envelope.LATE_COLUMNS`) to ``late``, writers idempotent per
        batch id; ``trigger``: a :class:`~spark_ext.sinks.trigger.Trigger` or
        ``DataStreamWriter.trigger`` keywords (default: every second); ``path`` and
        ``max_open_keys``: docs/design.md, "Tracked queries"."""
        write = as_callable(sink, "TrackedQuery.start(sink)")
        if late is None:
            raise ConfigError("TrackedQuery.start(late)", "give a writer for late rows")
        write_late = as_callable(late, "TrackedQuery.start(late)")
        check_path(path)
        if path == "driver" and not self.stream.closing.sources:
            raise ConfigError(
                "TrackedQuery.start(path)",
                "the driver path needs Closing sources (an upstream-closed query's end "
                "events trigger no batch of its own): use path='distributed'",
            )
        if topic_partitions is not None:
            check_partitions(self.stream.closing.sources, topic_partitions)
        keys = self.shard_keys(checkpoint)
        check_layout(checkpoint, self.layout(keys, path))
        check_agent_and_checkpoint(self.stream.agent.state(), self.name, checkpoint)
        self.stream.agent.declare(self.windowing.namespace, self.stream.closing.sources)

        args = (self.name, self.stream.agent, write, write_late, self.result_schema().names)
        sources = self.stream.closing.sources
        common: dict[str, Any] = {"namespace": self.windowing.namespace, "sources": sources}
        if path == "driver":
            out = self._input()
            self._output_schema()  # the name check
            handler: BatchHandler = DriverHandler(
                *args,
                **common,
                idle=idle,
                cfg=self._config(),
                checkpoint=checkpoint,
                result_schema=self.result_schema(),
                max_open_keys=max_open_keys,
            )
        else:
            out = self.plan(keys)
            handler = BatchHandler(*args, **common, idle=idle)
        self.handler = handler
        writer = out.writeStream.queryName(self.name).foreachBatch(handler)
        writer = writer.option("checkpointLocation", checkpoint)
        if isinstance(trigger, Trigger):
            writer = trigger.apply(writer)
        else:
            writer = writer.trigger(**(trigger or {"processingTime": "1 second"}))
        return writer.start()

    def layout(self, keys: list[int], path: str = "distributed") -> dict[str, object]:
        """What this query's state is keyed and laid out by (recorded in its checkpoint); the
        driver path's state is in its own files, so ``path`` is part of it."""
        layout: dict[str, object] = {
            "shards": self.shards,  # first: the difference a restart names
            "shard_keys": keys,
            "windowing": windowing_layout(self.windowing),
            "namespace": self.windowing.namespace,
            "operator": type(self.operator).__name__,
            "upstream": self.stream.upstream,
        }
        if path != "distributed":  # a distributed checkpoint from before paths existed: same
            layout["path"] = path
        return layout

    def result_schema(self) -> StructType:
        """The schema of the result rows handed to the sink."""
        fields_ = list(self.operator.output_schema.fields)
        if self.forward_namespace:
            fields_ += [f for f in RESULT_ENVELOPE if f.name in ("fwd_substream", "fwd_label")]
        return StructType(fields_)
