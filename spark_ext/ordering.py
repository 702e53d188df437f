"""Deterministic-ordering buffers: release elements in a total order, only once it is ensured.

Spark replays a micro-batch with the same offsets, but the order rows reach an operator
(after a shuffle, and across batches whose boundaries depend on how the batches were planned)
is not stable. An order-sensitive fold such as an EWMA then computes different values on a
replay. The buffer fixes the order: per shard, it holds elements sorted by the total order

    t(x) = (event time, source, partition, offset)

and releases an element only when no element with a smaller ``t`` can still arrive:

* **progress**: every source partition has shown an event time past ``t`` (each partition's
  event times are non-decreasing, so a partition that showed ``T`` will send nothing before
  ``T``). Each source task reports its partitions' maximum event time to *every* shard as a
  small progress row (:func:`mark_progress`), so a shard learns about partitions none of its
  keys live in; a row ``is_end=True`` with a null key closes its partition (progress +inf);
* **end event** (optional): a row ``is_end=True`` for a key -- e.g. the tracker's
  substream-end event -- releases everything buffered for that key and drops its state.

Released elements go, in order, through an optional dedup decision
(:class:`spark_ext.dedup.BucketDedup`) and then the fold (:class:`EwmaFahrenheit`). An element
older than what was already released cannot be put in order: it is emitted as ``late`` (a
duplicate delivery, dropped by dedup, or a genuinely late element, quarantined by the sink).

State per shard (bounded, and reported as ``buffered_rows`` / ``state_bytes``): the buffered
elements (bounded by the partitions' event-time skew; :class:`OrderingBufferFull` past
``max_buffered_rows``), one progress value per partition, one fold value per live key.

Guarantees: for a deterministic input (same records per partition, in offset order), the
released sequence per key -- and so every fold value -- is the same whatever the batch plan
and however often a batch is replayed. Does not guarantee: progress while a partition is idle
(nothing is released until it sends data, a close row or the key's end event).

Example
-------
>>> config = OrderingConfig(partitions=(("readings", 0), ("readings", 1)))
>>> out = order_and_fold(readings_df, config)            # doctest: +SKIP
>>> out.writeStream.foreachBatch(DedupSink(None, out_path, "ewma")).start()  # doctest: +SKIP
"""

from __future__ import annotations

import json
import logging
import warnings
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.streaming.state import GroupState
from pyspark.sql.types import (
    BinaryType,
    DoubleType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from spark_ext.dedup.bucket import BucketDedup
from spark_ext.dedup.catalog import DedupCatalog
from spark_ext.dedup.config import DedupConfig
from spark_ext.dedup.metrics import DedupMetrics
from spark_ext.dedup.tags import KIND_DUPLICATE, KIND_LATE, KIND_METRICS, KIND_NEW
from spark_ext.errors import ConfigError, SparkExtError
from spark_ext.hashing import shard_of

log = logging.getLogger(__name__)

#: Progress of a closed partition: past every event time.
CLOSED = np.iinfo(np.int64).max

#: Columns the buffer holds per element, in this order; the first four form t(x).
ELEMENT_COLUMNS = ("event_time_ms", "topic", "partition", "offset", "key", "record_id", "value")
ORDER_COLUMNS = ["event_time_ms", "topic", "partition", "offset"]

#: What :func:`order_and_fold` needs from its input.
INPUT_COLUMNS = ("key", "record_id", "event_time", "value", "topic", "partition", "offset")

KIND_ROW = "row"
KIND_PROGRESS = "progress"
KIND_END = "end"

MARKED_SCHEMA = StructType(
    [
        StructField("shard", IntegerType()),
        StructField("kind", StringType()),
        StructField("key", StringType()),
        StructField("record_id", StringType()),
        StructField("event_time_ms", LongType()),
        StructField("value", DoubleType()),
        StructField("topic", StringType()),
        StructField("partition", IntegerType()),
        StructField("offset", LongType()),
    ]
)

OUTPUT_SCHEMA = StructType(
    [
        StructField("_kind", StringType()),
        StructField("key", StringType()),
        StructField("record_id", StringType()),
        StructField("event_time", TimestampType()),
        StructField("temp_c", DoubleType()),
        StructField("temp_f", DoubleType()),
        StructField("ewma_f", DoubleType()),
        StructField("seq", LongType()),
        StructField("topic", StringType()),
        StructField("partition", IntegerType()),
        StructField("offset", LongType()),
        StructField("_bucket", IntegerType()),
        StructField("_generation", LongType()),
        StructField("_coords", StringType()),
        StructField("_detail", StringType()),
    ]
)

#: The columns of a result row (what a sink writes).
RESULT_COLUMNS = [f.name for f in OUTPUT_SCHEMA.fields if not f.name.startswith("_")]

_STATE_SCHEMA = StructType([StructField("meta", BinaryType()), StructField("bloom", BinaryType())])


class OrderingBufferFull(SparkExtError, RuntimeError):
    """A shard buffers more than ``max_buffered_rows`` elements: some partition stalls.

    The buffer never releases out of order to make room; raise ``max_buffered_rows``, close
    the idle partition, or send the key's end event.
    """


@dataclass(frozen=True)
class OrderingConfig:
    """How to order and fold.

    Parameters
    ----------
    partitions
        Every ``(topic, partition)`` of the source; the progress release waits for all of them.
    shards
        Groups of the stateful operator (keys are spread over them by a stable hash).
    alpha
        EWMA smoothing factor in (0, 1].
    buffered
        ``False`` disables the buffer: elements are folded in arrival order (the naive
        operator, kept to show what the buffer fixes).
    max_buffered_rows
        Per shard; past it :class:`OrderingBufferFull` is raised.
    """

    partitions: tuple[tuple[str, int], ...]
    shards: int = 2
    alpha: float = 0.3
    buffered: bool = True
    max_buffered_rows: int = 1_000_000

    def __post_init__(self) -> None:
        if not self.partitions:
            raise ConfigError("ordering.partitions", "must list every source partition")
        if self.shards < 1:
            raise ConfigError("ordering.shards", f"must be >= 1, got {self.shards}")
        if not 0.0 < self.alpha <= 1.0:
            raise ConfigError("ordering.alpha", f"must be in (0, 1], got {self.alpha}")
        if self.max_buffered_rows < 1:
            raise ConfigError("ordering.max_buffered_rows", "must be >= 1")

    @classmethod
    def for_topic(cls, topic: str, partitions: int, **kwargs: Any) -> OrderingConfig:
        return cls(partitions=tuple((topic, p) for p in range(partitions)), **kwargs)


def _partition_id(topic: str, partition: int) -> str:
    return f"{topic}/{int(partition)}"


def _empty_elements() -> pd.DataFrame:
    return pd.DataFrame(
        {
            "event_time_ms": pd.Series(dtype="int64"),
            "topic": pd.Series(dtype="object"),
            "partition": pd.Series(dtype="int64"),
            "offset": pd.Series(dtype="int64"),
            "key": pd.Series(dtype="object"),
            "record_id": pd.Series(dtype="object"),
            "value": pd.Series(dtype="float64"),
        }
    )


@dataclass
class Released:
    """What one :meth:`OrderingBuffer.release` gave: in-order elements and late ones."""

    in_order: pd.DataFrame
    late: pd.DataFrame
    ended_keys: list[str]


@dataclass
class OrderingBuffer:
    """The pure buffer of one shard: offer elements and progress, release in total order.

    Parameters
    ----------
    partitions
        Ids ``"topic/partition"`` of every source partition.
    buffered
        ``False``: :meth:`release` returns every offered element at once, in arrival order.
    """

    partitions: tuple[str, ...]
    buffered: bool = True
    max_rows: int = 1_000_000
    elements: pd.DataFrame = field(default_factory=_empty_elements)
    progress: dict[str, int] = field(default_factory=dict)
    released_below: int | None = None
    _late: list[pd.DataFrame] = field(default_factory=list)
    _ended: list[str] = field(default_factory=list)

    @property
    def frontier(self) -> int | None:
        """Minimum progress over every partition; ``None`` until each has reported."""
        if any(p not in self.progress for p in self.partitions):
            return None
        return min(self.progress[p] for p in self.partitions)

    def offer(self, rows: pd.DataFrame) -> None:
        """Add elements (columns :data:`ELEMENT_COLUMNS`), arrival order preserved."""
        if rows.empty:
            return
        rows = rows.loc[:, list(ELEMENT_COLUMNS)]
        if self.buffered and self.released_below is not None:
            late = rows["event_time_ms"] < self.released_below
            if late.any():
                self._late.append(rows[late])
                rows = rows[~late]
        self.elements = pd.concat([self.elements, rows], ignore_index=True)
        if self.buffered and len(self.elements) > self.max_rows:
            raise OrderingBufferFull(
                f"{len(self.elements)} elements buffered (max {self.max_rows}); "
                f"progress {self.progress}"
            )

    def observe(self, topic: str, partition: int, event_time_ms: int) -> None:
        """A partition's progress: it will send nothing with an earlier event time."""
        pid = _partition_id(topic, partition)
        self.progress[pid] = max(self.progress.get(pid, event_time_ms), int(event_time_ms))

    def end(self, key: str) -> None:
        """The key's substream ended (tracker end event): release all of it now."""
        self._ended.append(key)

    def release(self) -> Released:
        """Elements whose order is ensured, sorted by t(x); late elements; ended keys."""
        late = (
            pd.concat(self._late, ignore_index=True).sort_values(ORDER_COLUMNS, kind="mergesort")
            if self._late
            else _empty_elements()
        )
        self._late = []
        ended, self._ended = self._ended, []
        if not self.buffered:
            out, self.elements = self.elements, _empty_elements()
            return Released(out.reset_index(drop=True), late, ended)
        frontier = self.frontier
        ready = self.elements["key"].isin(ended)
        if frontier is not None:
            ready |= self.elements["event_time_ms"] < frontier
            if self.released_below is None or frontier > self.released_below:
                self.released_below = frontier
        out = self.elements[ready].sort_values(ORDER_COLUMNS, kind="mergesort")
        self.elements = self.elements[~ready].reset_index(drop=True)
        return Released(out.reset_index(drop=True), late.reset_index(drop=True), ended)

    def to_json(self) -> dict[str, Any]:
        return {
            "progress": self.progress,
            "released_below": self.released_below,
            "elements": self.elements.astype(object).values.tolist(),
        }

    def load_json(self, data: dict[str, Any]) -> None:
        self.progress = {k: int(v) for k, v in data["progress"].items()}
        self.released_below = data["released_below"]
        rows = data["elements"]
        if rows:
            self.elements = pd.DataFrame(rows, columns=list(ELEMENT_COLUMNS)).astype(
                _empty_elements().dtypes.to_dict()
            )


@dataclass
class EwmaFahrenheit:
    """EWMA of temperatures converted from Celsius to Fahrenheit, per key; order-sensitive.

    ``ewma_0 = f_0``, ``ewma_i = alpha * f_i + (1 - alpha) * ewma_(i-1)``. The state of a key
    is ``(ewma, seq)``, ``seq`` counting the values folded.
    """

    alpha: float = 0.3
    state: dict[str, tuple[float, int]] = field(default_factory=dict)

    @staticmethod
    def fahrenheit(celsius: np.ndarray) -> np.ndarray:
        return np.asarray(celsius, dtype=float) * 9.0 / 5.0 + 32.0

    def fold(self, keys: np.ndarray, celsius: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Fold values in the given order; the EWMA and ``seq`` after each one."""
        temps_f = self.fahrenheit(celsius)
        ewma = np.empty(len(keys))
        seq = np.empty(len(keys), dtype=np.int64)
        for i, (key, f) in enumerate(zip(keys, temps_f, strict=True)):
            prev = self.state.get(key)
            value = f if prev is None else self.alpha * f + (1 - self.alpha) * prev[0]
            n = 1 if prev is None else prev[1] + 1
            self.state[key] = (float(value), n)
            ewma[i], seq[i] = value, n
        return ewma, seq

    def drop(self, key: str) -> None:
        self.state.pop(key, None)


# -- Spark ------------------------------------------------------------------------------------


def mark_progress(df: DataFrame, config: OrderingConfig) -> DataFrame:
    """Elements routed to their shard, plus per source task one progress row per shard.

    The progress row of partition ``p`` carries the maximum event time (or :data:`CLOSED`
    after a close row) seen in this task's rows of ``p``; it goes to every shard. Computed from
    the batch's own rows only, so a replay with the same offsets sends the same rows.
    """
    missing = [c for c in INPUT_COLUMNS if c not in df.columns]
    if missing:
        raise ConfigError("ordering.input", f"columns {missing} missing from {df.columns}")
    cols = [*INPUT_COLUMNS, "is_end"] if "is_end" in df.columns else list(INPUT_COLUMNS)
    shards = config.shards
    names = MARKED_SCHEMA.fieldNames()

    def mark(batches: Iterator[pd.DataFrame]) -> Iterator[pd.DataFrame]:
        progress: dict[tuple[str, int], int] = {}
        for pdf in batches:
            if pdf.empty:
                continue
            et = pd.to_datetime(pdf["event_time"], utc=True).astype("int64") // 1_000_000
            pdf = pdf.assign(event_time_ms=et)
            is_end = (
                pdf["is_end"].fillna(False).astype(bool)
                if "is_end" in pdf
                else pd.Series(False, index=pdf.index)
            )
            closes = is_end & pdf["key"].isna()
            seen = pdf.assign(_p=np.where(closes, CLOSED, pdf["event_time_ms"]))
            for (topic, part), mx in seen.groupby(["topic", "partition"])["_p"].max().items():
                k = (str(topic), int(part))
                progress[k] = max(progress.get(k, int(mx)), int(mx))
            keyed = pdf[~closes]
            if keyed.empty:
                continue
            out = keyed.assign(
                shard=shard_of(keyed["key"].astype(str).to_numpy(), shards),
                kind=np.where(is_end[~closes], KIND_END, KIND_ROW),
            )
            yield out[names]
        if progress:
            rows = [
                {
                    "shard": s,
                    "kind": KIND_PROGRESS,
                    "key": None,
                    "record_id": None,
                    "event_time_ms": mx,
                    "value": None,
                    "topic": topic,
                    "partition": part,
                    "offset": None,
                }
                for (topic, part), mx in sorted(progress.items())
                for s in range(shards)
            ]
            yield pd.DataFrame(rows, columns=names)

    return df.select(*cols).mapInPandas(mark, MARKED_SCHEMA)


@dataclass
class ShardProcessor:
    """One shard's step: buffer -> release in order -> dedup (optional) -> EWMA fold."""

    config: OrderingConfig
    dedup_config: DedupConfig | None
    shard: int
    buffer: OrderingBuffer = field(init=False)
    fold: EwmaFahrenheit = field(init=False)
    dedup: BucketDedup | None = field(init=False)

    def __post_init__(self) -> None:
        self.buffer = OrderingBuffer(
            partitions=tuple(_partition_id(t, p) for t, p in self.config.partitions),
            buffered=self.config.buffered,
            max_rows=self.config.max_buffered_rows,
        )
        self.fold = EwmaFahrenheit(self.config.alpha)
        self.dedup = BucketDedup(self.dedup_config, self.shard) if self.dedup_config else None

    def load(self, meta: bytes | None, bloom: bytes | None) -> None:
        if meta:
            data = json.loads(meta)
            self.buffer.load_json(data["buffer"])
            self.fold.state = {k: (float(v[0]), int(v[1])) for k, v in data["folds"].items()}
        if self.dedup is not None:
            self.dedup.load(bloom)

    def dump(self) -> tuple[bytes, bytes | None]:
        meta = json.dumps(
            {"buffer": self.buffer.to_json(), "folds": self.fold.state}, sort_keys=True
        ).encode()
        return meta, self.dedup.dump() if self.dedup is not None else None

    def step(self, marked: pd.DataFrame) -> pd.DataFrame:
        """Process one batch of marked rows (in arrival order); the output rows."""
        kinds = marked["kind"]
        self.buffer.offer(marked[kinds == KIND_ROW])
        for row in marked[kinds == KIND_PROGRESS].itertuples(index=False):
            self.buffer.observe(row.topic, row.partition, row.event_time_ms)
        for key in marked.loc[kinds == KIND_END, "key"]:
            self.buffer.end(str(key))
        released = self.buffer.release()
        metrics = DedupMetrics(rows=len(released.in_order) + len(released.late))
        candidates = pd.concat(
            [released.in_order.assign(_late=False), released.late.assign(_late=True)],
            ignore_index=True,
        )
        candidates["_coords"] = (
            candidates["topic"].astype(str)
            + "/"
            + candidates["partition"].astype(str)
            + "/"
            + candidates["offset"].astype(str)
        )
        keep = np.ones(len(candidates), dtype=bool)
        if self.dedup is not None:
            catalog = DedupCatalog(self.dedup.config.catalog_path)
            keep, metrics = self.dedup.decide(
                candidates["record_id"].astype(str).to_numpy(),
                candidates["event_time_ms"].to_numpy(),
                candidates["_coords"].to_numpy(),
                catalog.lookup_ids,
            )
        late = candidates["_late"].to_numpy(dtype=bool)
        folded = candidates[keep & ~late]
        ewma, seq = self.fold.fold(folded["key"].to_numpy(), folded["value"].to_numpy())
        for key in released.ended_keys:
            self.fold.drop(key)
        out = candidates.assign(
            _kind=np.where(~keep, KIND_DUPLICATE, np.where(late, KIND_LATE, KIND_NEW)),
            ewma_f=np.nan,
            seq=pd.array([pd.NA] * len(candidates), dtype="Int64"),
        )
        out.loc[folded.index, "ewma_f"] = ewma
        out.loc[folded.index, "seq"] = seq
        metrics.late_rows = int((keep & late).sum())
        metrics.buffered_rows = len(self.buffer.elements)
        meta, bloom = self.dump()
        metrics.state_bytes = len(meta) + (len(bloom) if bloom else 0)
        return self._output(out, metrics)

    def _output(self, out: pd.DataFrame, metrics: DedupMetrics) -> pd.DataFrame:
        generation = (
            self.dedup.bloom.generation_of(out["event_time_ms"].to_numpy())
            if self.dedup is not None
            else np.zeros(len(out), dtype=np.int64)
        )
        rows = pd.DataFrame(
            {
                "_kind": out["_kind"],
                "key": out["key"],
                "record_id": out["record_id"],
                "event_time": pd.to_datetime(out["event_time_ms"], unit="ms", utc=True),
                "temp_c": out["value"],
                "temp_f": EwmaFahrenheit.fahrenheit(out["value"].to_numpy()),
                "ewma_f": out["ewma_f"],
                "seq": out["seq"],
                "topic": out["topic"],
                "partition": out["partition"],
                "offset": out["offset"],
                "_bucket": self.shard,
                "_generation": generation,
                "_coords": out["_coords"],
                "_detail": None,
            }
        )
        row: dict[str, Any] = {c: None for c in OUTPUT_SCHEMA.fieldNames()}
        row.update(_kind=KIND_METRICS, _bucket=self.shard, _detail=metrics.to_json())
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)  # all-null columns of the row
            return pd.concat([rows, pd.DataFrame([row])], ignore_index=True)


def end_control_rows(
    end_events: DataFrame, key: Column | str = "substream", source: str = "tracker"
) -> DataFrame:
    """Turn a stream of substream-end events into control rows for :func:`order_and_fold`.

    ``end_events`` is e.g. the tracker's end-event source (columns ``seq``, ``substream``,
    ``start_ms``, ``end_ms``); ``key`` says which ordering key an event ends (by default the
    substream id itself). Union the result with the data rows::

        rows = readings.unionByName(end_control_rows(tracker_ends, F.col("sensor")))

    The control rows' coordinates are ``(source, 0, seq)``; that pseudo-partition is not one of
    :attr:`OrderingConfig.partitions`, so it never holds back the progress release.
    """
    key_col = F.col(key) if isinstance(key, str) else key
    return end_events.select(
        key_col.cast("string").alias("key"),
        F.lit(None).cast("string").alias("record_id"),
        F.timestamp_millis(F.col("end_ms")).alias("event_time"),
        F.lit(None).cast("double").alias("value"),
        F.lit(source).alias("topic"),
        F.lit(0).alias("partition"),
        F.col("seq").cast("long").alias("offset"),
        F.lit(True).alias("is_end"),
    )


def order_and_fold(
    df: DataFrame, config: OrderingConfig, dedup: DedupConfig | None = None
) -> DataFrame:
    """Order a stream per shard, optionally deduplicate it, and fold the EWMA.

    Parameters
    ----------
    df
        Streaming rows with :data:`INPUT_COLUMNS` (``key`` is the substream, e.g. the sensor;
        ``value`` the Celsius temperature) and optionally ``is_end`` (control rows: with a key,
        the key's end event; with a null key, the partition's close).
    dedup
        With a :class:`~spark_ext.dedup.DedupConfig`, released elements pass the Bloom +
        catalog decision first (its ``buckets`` are ignored: a shard is the bucket, so every
        copy of a record must carry the same key).

    Returns
    -------
    DataFrame
        :data:`OUTPUT_SCHEMA`: ``_kind`` ``"new"`` (folded, in order), ``"late"``,
        ``"duplicate"`` or ``"metrics"``. Write it with :class:`spark_ext.dedup.DedupSink`.
    """

    def step(
        key: tuple[Any, ...], frames: Iterator[pd.DataFrame], state: GroupState
    ) -> Iterator[pd.DataFrame]:
        shard = int(key[0])
        processor = ShardProcessor(config, dedup, shard)
        if state.exists:
            meta, bloom = state.get
            processor.load(bytes(meta) if meta else None, bytes(bloom) if bloom else None)
        marked = pd.concat(list(frames), ignore_index=True)
        out = processor.step(marked)
        state.update(processor.dump())
        yield out

    return (
        mark_progress(df, config)
        .groupBy("shard")
        .applyInPandasWithState(step, OUTPUT_SCHEMA, _STATE_SCHEMA, "append", "NoTimeout")
    )
