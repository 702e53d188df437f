"""The ordering operator on Spark: mark progress, order per shard, fold (and dedup) in order.

:func:`mark_progress` routes elements to their shard and sends every shard each source task's
per-partition progress; :func:`order_and_fold` runs a
:class:`~spark_ext.ordering.shard.ShardProcessor` per shard in ``applyInPandasWithState``;
:func:`end_control_rows` turns tracker end events into the control rows that end a key.
"""

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


# -- Spark ------------------------------------------------------------------------------------


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


def end_control_rows(
    end_events: DataFrame, key: Column | str = "substream", source: str = "tracker"
) -> DataFrame:
    """Turn a stream of substream-end events into control rows for :func:`order_and_fold`.

    ``end_events`` is e.g. the tracker's end-event source (columns ``seq``, ``substream``,
    ``start_ms``, ``end_ms``); ``key`` says which ordering key an event ends (by default the
    substream id itself). Union the result with the data rows::

        rows = readings.unionByName(end_control_rows(tracker_ends, F.col("sensor")))

    Their coordinates ``(source, 0, seq)`` are no partition of the config's.
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
    df: DataFrame, config: OrderingConfig, fold: KeyedFold, dedup: DedupConfig | None = None
) -> DataFrame:
    """Order a stream per shard, optionally deduplicate it, and apply ``fold`` in that order.

    Parameters
    ----------
    df
        Streaming rows with :data:`INPUT_COLUMNS` (``key`` is the substream, e.g. the sensor;
        ``value`` the number folded) and optionally ``is_end`` (control rows: with a key,
        the key's end event; with a null key, the partition's close).
    config
        The source partitions, the shards and the buffer's bound.
    fold
        The order-sensitive fold (:class:`~spark_ext.ordering.fold.KeyedFold`); its
        :attr:`~spark_ext.ordering.fold.KeyedFold.fields` become output columns.
    dedup
        With a :class:`~spark_ext.dedup.DedupConfig`, released elements pass the Bloom +
        catalog decision first (its ``buckets`` are ignored: a shard is the bucket, so every
        copy of a record must carry the same key).

    Returns
    -------
    DataFrame
        :func:`~spark_ext.ordering.shard.output_schema` of ``fold``: ``_kind`` ``"new"``
        (folded, in order), ``"late"``,
        ``"duplicate"`` or ``"metrics"``. Write it with :class:`spark_ext.dedup.DedupSink`.
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
