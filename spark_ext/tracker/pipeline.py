"""Window a stream and close it by the tracker: the Spark plan around an operator.

::

    source rows ──assign (mapInPandas)──┐  label, substreams, shard; XOR "sent" report
                                        ├─ union ─ groupBy(substream, shard)
    end events ──fan out to shards──────┘          .applyInPandasWithState(operator)
    (spark_ext_tracker source)                     XOR "finished" report, results
                                                        │
                             foreachBatch (driver): 1. collect the batch's reports
                                                    2. write results to the sink (idempotent by batch id)
                                                    3. apply the reports to the agent, once per key
                                                    4. (Spark) commit the batch

Where reports go: executors return them *with the batch* (as rows of the operator's output,
one per task and stage) and the driver applies them to the agent in ``foreachBatch``. Why: a
report then exists exactly when the batch's output exists -- a failed task attempt's report
rows are discarded by Spark together with its output, and a replayed batch re-sends the same
keys ``(query, batch, stage, partition)``, which the agent ignores -- so no executor ever
needs to reach the agent, and the report traffic is one small row per task. Step 2 before 3:
a crash between them replays the batch, the sink skips it (same batch id) and the reports are
applied then; an end event is never published for results that are not written yet.

Two queries through Kafka: the upstream query calls :meth:`TrackedQuery.forward_to` with the
downstream namespace and writes to a :class:`KafkaSink` (give it a ``sink_id`` so a replayed
batch is not written twice); each result row carries ``fwd_substream`` / ``fwd_label`` and
the upstream's operator report counts it as *sent* into that substream and *closes* it when
the upstream window is flushed. The downstream reads the topic with
``TrackedStream(upstream=True, closing=Closing.upstream())``: it reuses those labels and
substreams, reports them *finished*, and its windows end when the agent both queries share
(a :class:`~spark_ext.tracker.kafka_agent.KafkaTrackingAgent` across machines) has seen the
close and a zero XOR. See :mod:`jobs.tracker_two_queries`.

Fault points (:mod:`spark_ext.crash`): ``tracker.after_sink``, ``tracker.after_reports``,
``tracker.agent.before_append``, ``tracker.agent.after_append``.

Example
-------
>>> agent = LocalTrackingAgent("var/tracker/counts")                               # doctest: +SKIP
>>> query = (
...     TrackedStream(events, key="user_id", event_time="event_time", agent=agent,
...                   closing=Closing.partitions("events", 3), close_marker="close_through")
...     .apply(Tumbling("10 seconds", namespace="counts"), WindowAggregate(Count(), Sum("amount")))
...     .start(DeltaSink("var/out/counts"), checkpoint="var/chk/counts")
... )                                                                               # doctest: +SKIP
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd
from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.streaming import StreamingQuery
from pyspark.sql.types import (
    DataType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from spark_ext.crash import declare
from spark_ext.operators.base import Group, OperatorState, SubstreamOperator
from spark_ext.operators.runner import (
    ALL_SUBSTREAMS,
    KIND_DATA,
    KIND_END,
    KIND_REPORT,
    KIND_RESULT,
    REPORTS_GROUP,
    run_group,
)
from spark_ext.tracker.agent import TrackerFigures, TrackingAgent
from spark_ext.tracker.errors import ConfigError
from spark_ext.tracker.labels import key_hashes, labels_of
from spark_ext.tracker.reports import ReportBuilder, TaskReport, batch_reports
from spark_ext.tracker.source import FORMAT, register
from spark_ext.tracker.substreams import Substream, Windowing

log = logging.getLogger(__name__)

#: Fault points of a tracked query's batch handler.
AFTER_SINK = declare("tracker.after_sink", "driver", "results written, reports not applied")
AFTER_REPORTS = declare("tracker.after_reports", "driver", "reports applied, Spark commit not yet")

ASSIGN_STAGE = "assign"

ENVELOPE_FIELDS = [
    StructField("substream", StringType()),
    StructField("shard", IntegerType()),
    StructField("kind", StringType()),
    StructField("tracked", StringType()),
    StructField("start_ms", LongType()),
    StructField("end_ms", LongType()),
    StructField("key", StringType()),
    StructField("event_time_ms", LongType()),
    StructField("label", LongType()),
    StructField("side", StringType()),
    StructField("report", StringType()),
]
RESULT_ENVELOPE = [
    StructField("kind", StringType()),
    StructField("report", StringType()),
    StructField("fwd_substream", StringType()),
    StructField("fwd_label", LongType()),
]


@dataclass(frozen=True)
class Closing:
    """What closes a substream at its source.

    Attributes
    ----------
    sources
        Source partitions (``"topic:partition"``) that must each be closed past a substream's
        end -- by a close marker from its producer, or, when ``ordered``, by its own event
        time passing the end. Empty: only explicit closes (an upstream query) end substreams.
    ordered
        The partitions deliver event times in non-decreasing order (so a row at ``t`` closes
        its partition through ``t``).
    """

    sources: tuple[str, ...] = ()
    ordered: bool = False

    @classmethod
    def partitions(cls, topic: str, partitions: int, ordered: bool = True) -> Closing:
        """Every partition of ``topic`` closes by markers (and by order when ``ordered``)."""
        if partitions <= 0:
            raise ConfigError("Closing.partitions", f"must be positive, got {partitions}")
        return cls(tuple(f"{topic}:{p}" for p in range(partitions)), ordered)

    @classmethod
    def upstream(cls) -> Closing:
        """Substreams are closed by the upstream query that forwards them (through Kafka)."""
        return cls()


class BatchSink:
    """Where results go: ``write(df, batch_id)`` must be idempotent per batch id."""

    def write(self, df: DataFrame, batch_id: int) -> None:
        raise NotImplementedError


@dataclass
class DeltaSink(BatchSink):
    """Append to a Delta table, at most once per batch (``txnAppId`` / ``txnVersion``)."""

    path: str
    app_id: str = ""

    def write(self, df: DataFrame, batch_id: int) -> None:
        (
            df.write.format("delta")
            .mode("append")
            .option("txnAppId", self.app_id or self.path)
            .option("txnVersion", batch_id)
            .save(self.path)
        )


@dataclass
class ForeachSink(BatchSink):
    """Call ``fn(df, batch_id)``; ``fn`` must skip a batch id it has already written."""

    fn: Callable[[DataFrame, int], None]

    def write(self, df: DataFrame, batch_id: int) -> None:
        self.fn(df, batch_id)


@dataclass
class KafkaSink(BatchSink):
    """Results as JSON values to a Kafka topic (keyed by ``key``), for a downstream query.

    With ``sink_id`` the records go through
    :class:`~connectors.kafka_sink.KafkaIdempotentWriter`: a replayed batch does not write
    its rows again. Without it Spark's Kafka writer is used, which is at-least-once: a
    replayed batch writes its rows again, and the downstream tracker then sees their labels
    twice and keeps the substream open (the XOR exposes the duplicate, nothing is emitted
    wrong). Give a ``sink_id`` wherever the upstream query can crash.
    """

    bootstrap: str
    topic: str
    sink_id: str | None = None
    _writer: Any = field(default=None, init=False, repr=False)

    def __post_init__(self) -> None:
        if self.sink_id:  # validated here, at start-up
            from connectors.kafka_sink import KafkaIdempotentWriter

            self._writer = KafkaIdempotentWriter(self.bootstrap, self.topic, self.sink_id)

    def write(self, df: DataFrame, batch_id: int) -> None:
        records = df.select(
            F.col("key").cast("string").alias("key"),
            F.to_json(F.struct(*df.columns)).alias("value"),
        )
        if self._writer is not None:
            self._writer(records, batch_id)
            return
        (
            records.write.format("kafka")
            .option("kafka.bootstrap.servers", self.bootstrap)
            .option("topic", self.topic)
            .save()
        )


@dataclass
class TrackedStream:
    """A stream whose elements are labelled, assigned to substreams and reported.

    Parameters
    ----------
    df
        Streaming DataFrame with ``topic``, ``partition``, ``offset`` (source coordinates;
        :func:`connectors.kafka.read_stream` provides them), the key and event-time columns,
        and the operator's input columns.
    key, event_time
        Grouping key column and event-time column (timestamp, or long milliseconds).
    agent, closing
        The tracking agent and what closes substreams at the source.
    close_marker
        A column that is non-null (a timestamp or long ms) on close-marker rows only: "this
        partition sends nothing older than this any more". Marker rows are not data.
    side
        A column with ``"left"`` / ``"right"`` (joins).
    upstream
        Rows come from an upstream tracked query (:class:`KafkaSink` output): their labels
        and substreams (``fwd_label``, ``fwd_substream``) are reused, not derived.
    """

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


def _ms(col: str, dtype: DataType) -> Any:
    if isinstance(dtype, TimestampType):
        return F.unix_millis(F.col(col))
    return F.col(col).cast("long")


@dataclass
class TrackedQuery:
    """The query of one tracked operator; :meth:`start` it with a sink."""

    stream: TrackedStream
    windowing: Windowing
    operator: SubstreamOperator
    name: str
    shards: int
    forward_namespace: str | None = None
    #: The driver's per-batch handler once started; ``handler.figures`` holds the agent's
    #: state-size figures after the last batch. The operator's state groups are Spark's
    #: ``stateOperators[].numRowsTotal`` (:func:`spark_ext.metrics.figures_from_progress`).
    handler: BatchHandler | None = None
    _input_types: dict[str, DataType] = field(default_factory=dict)

    def forward_to(self, namespace: str) -> TrackedQuery:
        """Report results as sent into ``namespace`` of a downstream query and close it there."""
        self.forward_namespace = namespace
        return self

    # -- plan ---------------------------------------------------------------------------------
    def _input(self) -> DataFrame:
        s = self.stream
        types = {f.name: f.dataType for f in s.df.schema}
        for c in (
            "topic",
            "partition",
            "offset",
            s.key,
            s.event_time,
            *self.operator.input_columns,
        ):
            if c not in types:
                raise ConfigError("TrackedStream.df", f"column {c!r} missing (has {sorted(types)})")
        self.operator.bind(s.df.schema)
        self._input_types = {c: types[c] for c in self.operator.input_columns}
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

    def _envelope_schema(self) -> StructType:
        return StructType(
            ENVELOPE_FIELDS + [StructField(c, t) for c, t in self._input_types.items()]
        )

    def _output_schema(self) -> StructType:
        return StructType(RESULT_ENVELOPE + list(self.operator.output_schema.fields))

    def plan(self) -> DataFrame:
        """The streaming DataFrame of operator output (results and report rows)."""
        prepared = self._input()
        envelope = self._envelope_schema()
        assign = _make_assign(
            self.windowing,
            self.operator.per_substream,
            self.shards,
            self.stream.closing.ordered,
            self.stream.upstream,
            list(self.operator.input_columns),
            [f.name for f in envelope],
        )
        data = prepared.mapInPandas(assign, envelope)
        spark = self.stream.df.sparkSession
        register(spark)
        ends = (
            spark.readStream.format(FORMAT)
            .options(**self.stream.agent.source_options())
            .option("namespaces", self.windowing.namespace)
            .load()
        )
        per_substream = self.operator.per_substream
        control = ends.select(
            (F.col("substream") if per_substream else F.lit(ALL_SUBSTREAMS)).alias("substream"),
            F.explode(F.sequence(F.lit(0), F.lit(self.shards - 1))).alias("shard"),
            F.lit(KIND_END).alias("kind"),
            F.col("substream").alias("tracked"),
            "start_ms",
            "end_ms",
            F.lit(None).cast("string").alias("key"),
            F.lit(None).cast("long").alias("event_time_ms"),
            F.col("seq").alias("label"),
            F.lit(None).cast("string").alias("side"),
            F.lit(None).cast("string").alias("report"),
            *[F.lit(None).cast(t).alias(c) for c, t in self._input_types.items()],
        )
        union = data.unionByName(control)
        func = _make_group_func(self.operator, self.forward_namespace, self._output_schema())
        return union.groupBy("substream", "shard").applyInPandasWithState(
            func, self._output_schema(), "blob string", "append", "NoTimeout"
        )

    def start(
        self,
        sink: BatchSink,
        checkpoint: str,
        trigger: dict[str, Any] | None = None,
    ) -> StreamingQuery:
        """Declare the namespace to the agent and start the query.

        ``trigger`` is passed to ``DataStreamWriter.trigger`` (default ``processingTime="1 second"``).
        """
        self.stream.agent.declare(self.windowing.namespace, self.stream.closing.sources)
        out = self.plan()
        handler = self.handler = BatchHandler(
            self.name, self.stream.agent, sink, self.result_columns()
        )
        return (
            out.writeStream.queryName(self.name)
            .foreachBatch(handler)
            .option("checkpointLocation", checkpoint)
            .trigger(**(trigger or {"processingTime": "1 second"}))
            .start()
        )

    def result_columns(self) -> list[str]:
        cols = [f.name for f in self.operator.output_schema]
        if self.forward_namespace:
            cols += ["fwd_substream", "fwd_label"]
        return cols


@dataclass
class BatchHandler:
    """The driver's per-batch steps 1-3 (module docstring); Spark does step 4."""

    query: str
    agent: TrackingAgent
    sink: BatchSink
    columns: list[str]
    #: The agent's state-size figures after the last batch (None before the first).
    figures: TrackerFigures | None = None

    def __call__(self, df: DataFrame, batch_id: int) -> None:
        df.persist()
        try:
            rows = df.where(F.col("kind") == KIND_REPORT).select("report").collect()  # 1
            results = df.where(F.col("kind") == KIND_RESULT).select(*self.columns)
            self.sink.write(results, batch_id)  # 2
            AFTER_SINK.reached(batch_id)
            reports = batch_reports(
                self.query, batch_id, (TaskReport.from_json(r.report) for r in rows)
            )
            ends = self.agent.apply(reports)  # 3
            AFTER_REPORTS.reached(batch_id)
            self.figures = self.agent.figures()
            log.info(
                "[%s] batch %d: %d reports, %d substreams ended; %s",
                self.query,
                batch_id,
                len(reports),
                len(ends),
                self.figures.line(),
            )
        finally:
            df.unpersist()


def _conform(frame: pd.DataFrame, columns: list[str]) -> pd.DataFrame:
    """``frame`` with exactly ``columns``; missing ones are object-typed nulls.

    (``reindex`` would fill float NaN, which Arrow cannot turn into a string column.)
    """
    for c in columns:
        if c not in frame.columns:
            frame[c] = pd.Series([None] * len(frame), dtype=object, index=frame.index)
    return frame[columns]


FAIL_TASK_ENV = "SPARK_EXT_FAIL_TASK_AT"


class InjectedTaskFailure(RuntimeError):
    """Raised on purpose by a test (``SPARK_EXT_FAIL_TASK_AT=<stage>@<batch>``)."""


def maybe_fail_task(stage: str) -> None:
    """Fail the first attempt of task 0 of ``stage`` in the chosen batch (task-retry tests).

    Spark retries the task (when ``spark.task.maxFailures`` > 1, e.g. master ``local[2,4]``)
    and discards the failed attempt's output, report rows included.
    """
    spec = os.environ.get(FAIL_TASK_ENV)
    if not spec:
        return
    from pyspark import TaskContext

    ctx = TaskContext.get()
    target, _, batch = spec.partition("@")
    if ctx is None or target != stage or ctx.partitionId() != 0 or ctx.attemptNumber() != 0:
        return
    if batch and ctx.getLocalProperty("streaming.sql.batchId") != batch:
        return
    mark = os.environ.get(FAIL_TASK_ENV + "_MARK")
    if mark:
        with open(mark, "a") as f:
            f.write(f"{stage}@{batch}\n")
    raise InjectedTaskFailure(f"injected failure in {stage}, batch {batch}, attempt 0")


def _task_partition() -> int:
    from pyspark import TaskContext

    ctx = TaskContext.get()
    return ctx.partitionId() if ctx is not None else 0


def _labels(data: pd.DataFrame) -> np.ndarray:
    """Labels of the rows of one Arrow batch, from their source coordinates."""
    return labels_of(data["_topic"].to_numpy(), data["_partition"], data["_offset"])


def _substream_ids(namespace: str, starts: np.ndarray, ends: np.ndarray) -> pd.Series:
    """``namespace/start/end`` per membership, one string built per distinct window."""
    pairs, inverse = np.unique(np.stack([starts, ends]), axis=1, return_inverse=True)
    names = np.asarray(
        [f"{namespace}/{a}/{b}" for a, b in zip(pairs[0].tolist(), pairs[1].tolist(), strict=True)],
        dtype=object,
    )
    return pd.Series(names[inverse.reshape(-1)], dtype=object)


def _make_assign(
    windowing: Windowing,
    per_substream: bool,
    shards: int,
    ordered: bool,
    upstream: bool,
    input_columns: list[str],
    envelope_columns: list[str],
) -> Callable[[Iterator[pd.DataFrame]], Iterator[pd.DataFrame]]:
    """The executor side of the assign stage (one call per task, over its Arrow batches)."""
    namespace = windowing.namespace

    def assign(frames: Iterator[pd.DataFrame]) -> Iterator[pd.DataFrame]:
        part = _task_partition()
        builder = ReportBuilder(ASSIGN_STAGE, part)
        for pdf in frames:
            markers = pdf[pdf["_close"].notna()]
            for (topic, p), g in markers.groupby(["_topic", "_partition"], sort=True):
                builder.add_progress(f"{topic}:{int(p)}", int(g["_close"].max()))
            data = pdf[pdf["_close"].isna() & pdf["_t"].notna()].reset_index(drop=True)
            if data.empty:
                continue
            times = data["_t"].to_numpy(dtype=np.int64)
            if ordered:
                for (topic, p), g in data.groupby(["_topic", "_partition"], sort=True):
                    builder.add_progress(f"{topic}:{int(p)}", int(g["_t"].max()))
            if upstream:
                idx = np.arange(len(data), dtype=np.int64)
                subs = [Substream.parse(str(s)) for s in data["_fwd_substream"]]
                foreign = {s.namespace for s in subs} - {namespace}
                if foreign:
                    raise ConfigError(
                        "TrackedStream.upstream",
                        f"rows forwarded into {sorted(foreign)}, this query tracks "
                        f"{namespace!r}: forward_to() and the windowing must name one namespace",
                    )
                starts = np.asarray([s.start_ms for s in subs], dtype=np.int64)
                ends = np.asarray([s.end_ms for s in subs], dtype=np.int64)
                labels = data["_fwd_label"].to_numpy(dtype=np.int64)
            else:
                idx, starts, ends = windowing.assign(times)
                labels = _labels(data)[idx]
            rows = data.iloc[idx].reset_index(drop=True)
            tracked = _substream_ids(namespace, starts, ends)
            codes, uniques = pd.factorize(rows["_key"])
            shard = (key_hashes(uniques) % np.uint64(shards)).astype(np.int32)[codes]
            out = pd.DataFrame(
                {
                    "substream": tracked if per_substream else ALL_SUBSTREAMS,
                    "shard": shard,
                    "kind": KIND_DATA,
                    "tracked": tracked,
                    "start_ms": starts,
                    "end_ms": ends,
                    "key": rows["_key"],
                    "event_time_ms": rows["_t"].astype(np.int64),
                    "label": labels,
                    "side": rows["_side"],
                    "report": None,
                    **{c: rows[c] for c in input_columns},
                }
            )
            if not upstream:  # forwarded rows were reported as sent by the upstream query
                builder.add_labels(tracked, labels, sent=True, ends=ends)
            yield out[envelope_columns]
        maybe_fail_task(ASSIGN_STAGE)  # after the data rows went out, before the report
        report = builder.build()
        if not report.is_empty():
            yield pd.DataFrame(
                {
                    "substream": [REPORTS_GROUP],
                    "shard": [part % shards],
                    "kind": [KIND_REPORT],
                    "report": [report.to_json()],
                }
            ).pipe(_conform, envelope_columns)

    return assign


def _make_group_func(
    operator: SubstreamOperator, forward_namespace: str | None, output: StructType
) -> Callable[[Any, Iterator[pd.DataFrame], Any], Iterator[pd.DataFrame]]:
    """The executor side of the operator stage (one call per group per batch)."""
    columns = [f.name for f in output]

    def func(key: Any, frames: Iterator[pd.DataFrame], state: Any) -> Iterator[pd.DataFrame]:
        substream, shard = str(key[0]), int(key[1])
        rows = pd.concat(list(frames), ignore_index=True)
        if substream == REPORTS_GROUP:
            yield _conform(pd.DataFrame({"kind": KIND_REPORT, "report": rows["report"]}), columns)
            return
        ostate = OperatorState.from_json(state.get[0] if state.exists else None)
        out = run_group(
            operator, Group(substream, shard), ostate, rows, _task_partition(), forward_namespace
        )
        if ostate.changed:
            if ostate.removed:
                state.remove()
            else:
                state.update((ostate.to_json(),))
        if out.results is not None and len(out.results):
            yield _conform(out.results.assign(kind=KIND_RESULT, report=None), columns)
        if not out.report.is_empty():
            yield _conform(
                pd.DataFrame({"kind": [KIND_REPORT], "report": [out.report.to_json()]}), columns
            )

    return func
