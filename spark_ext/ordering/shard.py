"""One shard's step of :func:`~spark_ext.ordering.order_and_fold`, as pure logic (pandas):
run in the stateful operator, and in unit tests without Spark."""

from __future__ import annotations

import json
from dataclasses import dataclass, field

import numpy as np
import pandas as pd
from pyspark.sql.types import (
    DoubleType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from spark_ext.dedup.bucket import BucketDedup, coords_string
from spark_ext.dedup.catalog import DedupCatalog
from spark_ext.dedup.config import DedupConfig
from spark_ext.dedup.metrics import DedupMetrics
from spark_ext.dedup.tags import KIND_DUPLICATE, KIND_LATE, KIND_NEW, with_metrics_row
from spark_ext.ordering.buffer import OrderingBuffer, partition_id
from spark_ext.ordering.config import OrderingConfig
from spark_ext.ordering.fold import FoldState, KeyedFold

__all__ = [
    "KIND_END",
    "KIND_PROGRESS",
    "KIND_ROW",
    "MARKED_SCHEMA",
    "ShardProcessor",
    "output_schema",
    "result_columns",
]

#: Kinds of the marked rows a shard receives (:func:`~spark_ext.ordering.mark_progress`).
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

#: The element columns a fold receives.
FOLD_INPUT = ("key", "record_id", "value", "event_time_ms", "topic", "partition", "offset")


def output_schema(fold: KeyedFold) -> StructType:
    """The schema of :func:`~spark_ext.ordering.order_and_fold`'s output with ``fold``."""
    return StructType(
        [
            StructField("_kind", StringType()),
            StructField("key", StringType()),
            StructField("record_id", StringType()),
            StructField("event_time", TimestampType()),
            StructField("value", DoubleType()),
            *fold.fields,
            StructField("topic", StringType()),
            StructField("partition", IntegerType()),
            StructField("offset", LongType()),
            StructField("_bucket", IntegerType()),
            StructField("_generation", LongType()),
            StructField("_coords", StringType()),
            StructField("_detail", StringType()),
        ]
    )


def result_columns(fold: KeyedFold) -> list[str]:
    """The columns of a result row with ``fold`` (what a sink writes): no ``_`` tag columns."""
    return [f.name for f in output_schema(fold).fields if not f.name.startswith("_")]


@dataclass
class ShardProcessor:
    """One shard's step: buffer -> release in order -> dedup (with ``dedup_config``; the shard
    is the bucket) -> the fold."""

    config: OrderingConfig
    dedup_config: DedupConfig | None
    shard: int
    fold: KeyedFold
    buffer: OrderingBuffer = field(init=False)
    fold_state: FoldState = field(init=False, default_factory=dict)
    dedup: BucketDedup | None = field(init=False)

    def __post_init__(self) -> None:
        self.buffer = OrderingBuffer(
            partitions=tuple(partition_id(t, p) for t, p in self.config.partitions),
            buffered=self.config.buffered,
            max_rows=self.config.max_buffered_rows,
        )
        self.dedup = BucketDedup(self.dedup_config, self.shard) if self.dedup_config else None

    def load(self, meta: bytes | None, bloom: bytes | None) -> None:
        if meta:
            data = json.loads(meta)
            self.buffer.load_json(data["buffer"])
            self.fold_state = dict(data["folds"])
        if self.dedup is not None:
            self.dedup.load(bloom)

    def dump(self) -> tuple[bytes, bytes | None]:
        meta = json.dumps(
            {"buffer": self.buffer.to_json(), "folds": self.fold_state}, sort_keys=True
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
        candidates["_coords"] = coords_string(candidates, ["topic", "partition", "offset"])
        keep = np.ones(len(candidates), dtype=bool)
        if self.dedup is not None:
            catalog = DedupCatalog.of(self.dedup.config)
            keep, metrics = self.dedup.decide(
                candidates["record_id"].astype(str).to_numpy(),
                candidates["event_time_ms"].to_numpy(),
                candidates["_coords"].to_numpy(),
                catalog.lookup_ids,
            )
        late = candidates["_late"].to_numpy(dtype=bool)
        folded = candidates[keep & ~late]
        columns = self._fold_columns(candidates, folded)
        for key in released.ended_keys:
            self.fold.drop(self.fold_state, key)
        out = candidates.assign(
            _kind=np.where(~keep, KIND_DUPLICATE, np.where(late, KIND_LATE, KIND_NEW))
        )
        out = pd.concat([out, columns], axis=1)
        metrics.late_rows = int((keep & late).sum())
        metrics.buffered_rows = len(self.buffer.elements)
        meta, bloom = self.dump()
        metrics.state_bytes = len(meta) + (len(bloom) if bloom else 0)
        return self._output(out, metrics)

    def _fold_columns(self, candidates: pd.DataFrame, folded: pd.DataFrame) -> pd.DataFrame:
        """The fold's columns for every candidate: :meth:`KeyedFold.describe` for all, the
        folded values for the folded ones, null elsewhere."""
        names = [f.name for f in self.fold.fields]
        columns = pd.DataFrame(index=candidates.index, columns=names, dtype=object)
        described = self.fold.describe(candidates)
        for name in described.columns:
            columns[name] = described[name].astype(object)
        if len(folded):
            values = self.fold.fold(self.fold_state, folded.loc[:, list(FOLD_INPUT)])
            for name in values.columns:
                columns.loc[folded.index, name] = values[name].astype(object)
        return columns

    def _output(self, out: pd.DataFrame, metrics: DedupMetrics) -> pd.DataFrame:
        generation = (
            self.dedup.bloom.generation_of(out["event_time_ms"].to_numpy())
            if self.dedup is not None
            else np.zeros(len(out), dtype=np.int64)
        )
        rows = out.assign(
            event_time=pd.to_datetime(out["event_time_ms"], unit="ms", utc=True),
            _bucket=self.shard,
            _generation=generation,
            _detail=None,
        )
        return with_metrics_row(rows[output_schema(self.fold).names], self.shard, metrics.to_json())
