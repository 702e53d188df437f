"""The ordering operator on Spark: mark progress, order per shard, fold (and dedup) in order."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import pandas as pd
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.streaming.state import GroupState
from pyspark.sql.types import BinaryType, StructField, StructType

from spark_ext.dedup.config import DedupConfig
from spark_ext.errors import ConfigError
from spark_ext.hashing import shard_of
from spark_ext.ordering.buffer import CLOSED
from spark_ext.ordering.config import OrderingConfig
from spark_ext.ordering.fold import KeyedFold
from spark_ext.ordering.shard import (
    KIND_END,
    KIND_PROGRESS,
    KIND_ROW,
    MARKED_SCHEMA,
    ShardProcessor,
    output_schema,
)

__all__ = ["INPUT_COLUMNS", "end_control_rows", "mark_progress", "order_and_fold"]

#: What :func:`order_and_fold` needs from its input.
INPUT_COLUMNS = ("key", "record_id", "event_time", "value", "topic", "partition", "offset")

_STATE_SCHEMA = StructType([StructField("meta", BinaryType()), StructField("bloom", BinaryType())])


def mark_progress(df: DataFrame, config: OrderingConfig) -> DataFrame:
    """Elements routed to their shard, plus per source task one progress row per shard: the
    maximum event time of each partition in the task's rows (:data:`CLOSED` after a close)."""
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
            rows = pd.DataFrame(
                [(s, t, p, mx) for (t, p), mx in sorted(progress.items()) for s in range(shards)],
                columns=["shard", "topic", "partition", "event_time_ms"],
            )
            yield rows.assign(
                kind=KIND_PROGRESS, key=None, record_id=None, value=None, offset=None
            )[names]

    return df.select(*cols).mapInPandas(mark, MARKED_SCHEMA)


def end_control_rows(
    end_events: DataFrame, key: Column | str = "substream", source: str = "tracker"
) -> DataFrame:
    """Control rows for :func:`order_and_fold` that end ``key`` (default: the substream id) at
    each end event (columns ``seq``, ``substream``, ``end_ms``); union them with the data rows.
    Their coordinates ``(source, 0, seq)`` are no partition of the config's."""
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
    df: DataFrame, config: OrderingConfig, fold: KeyedFold, dedup: DedupConfig | None = None
) -> DataFrame:
    """``df`` (:data:`INPUT_COLUMNS`, optionally ``is_end``: with a key, the key's end; with a
    null key, the partition's close) ordered per shard, deduplicated with ``dedup`` (a shard is
    the bucket: every copy of a record must carry the same key), folded in that order.

    Returns :func:`~spark_ext.ordering.shard.output_schema` of ``fold`` (``_kind`` ``"new"``,
    ``"late"``, ``"duplicate"`` or ``"metrics"``), for :class:`spark_ext.dedup.DedupSink`.
    """

    schema = output_schema(fold)

    def step(
        key: tuple[Any, ...], frames: Iterator[pd.DataFrame], state: GroupState
    ) -> Iterator[pd.DataFrame]:
        shard = int(key[0])
        processor = ShardProcessor(config, dedup, shard, fold)
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
        .applyInPandasWithState(step, schema, _STATE_SCHEMA, "append", "NoTimeout")
    )
