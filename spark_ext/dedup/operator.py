"""The dedup operator: Bloom filters in Spark state per bucket, the catalog behind them.

What it guarantees and what it costs: docs/design.md, "Dedup".

>>> config = DedupConfig(catalog_path="var/orders/catalog")
>>> tagged = deduplicate(stream_df, config)  # doctest: +SKIP
>>> tagged.writeStream.foreachBatch(DedupSink(config, "var/out", "orders"))  # doctest: +SKIP
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import pandas as pd
from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.streaming.state import GroupState
from pyspark.sql.types import BinaryType, IntegerType, LongType, StringType, StructField, StructType

from spark_ext.dedup.bucket import BucketDedup, coords_string
from spark_ext.dedup.catalog import DedupCatalog
from spark_ext.dedup.config import DedupConfig
from spark_ext.dedup.tags import KIND_DUPLICATE, KIND_NEW, with_metrics_row
from spark_ext.errors import ConfigError

__all__ = ["TAG_FIELDS", "deduplicate"]

_STATE_SCHEMA = StructType([StructField("bloom", BinaryType())])
#: The columns :func:`deduplicate` adds to its input.
TAG_FIELDS = [
    StructField("_kind", StringType()),
    StructField("_bucket", IntegerType()),
    StructField("_generation", LongType()),
    StructField("_detail", StringType()),
]


def _event_time_ms(series: pd.Series) -> np.ndarray:
    values = pd.to_datetime(series, utc=True)
    return (values.astype("int64") // 1_000_000).to_numpy()


def deduplicate(df: DataFrame, config: DedupConfig, emit_duplicates: bool = False) -> DataFrame:
    """``df`` tagged (:data:`TAG_FIELDS`, ``_kind`` from :mod:`~spark_ext.dedup.tags`) with the
    Bloom + catalog decision per bucket; ``"duplicate"`` rows only with ``emit_duplicates``.
    Rows are final once a :class:`~spark_ext.dedup.sink.DedupSink` wrote them (and the catalog).
    """
    for col in (config.id_column, config.event_time_column, *config.coordinate_columns):
        if col not in df.columns:
            raise ConfigError("dedup.columns", f"column {col!r} is not in {df.columns}")
    out_schema = StructType([*df.schema.fields, *TAG_FIELDS])
    names = out_schema.fieldNames()
    catalog = DedupCatalog.of(config)
    id_col, et_col = config.id_column, config.event_time_column
    coord_cols = list(config.coordinate_columns)

    # Spark's xxhash64 routes and feeds the filter (docs/design.md, "Dedup").
    id_hash = F.xxhash64(F.col(id_col).cast("string"))
    routed = df.withColumn("_hash", id_hash).withColumn(
        "_bucket", F.pmod(F.col("_hash"), F.lit(config.buckets)).cast("int")
    )

    def step(
        key: tuple[Any, ...], frames: Iterator[pd.DataFrame], state: GroupState
    ) -> Iterator[pd.DataFrame]:
        bucket = int(key[0])
        pdf = pd.concat(list(frames), ignore_index=True)
        dedup = BucketDedup(config, bucket)
        if state.exists:
            dedup.load(bytes(state.get[0]))
        pdf["_et"] = _event_time_ms(pdf[et_col])
        pdf = pdf.sort_values(["_et", *coord_cols], kind="mergesort", ignore_index=True)
        keep, metrics = dedup.decide(
            pdf[id_col].astype(str).to_numpy(),
            pdf["_et"].to_numpy(),
            lambda rows: coords_string(pdf.iloc[rows], coord_cols).tolist(),
            catalog.lookup_ids,
            hashes=pdf["_hash"].to_numpy().view(np.uint64),
        )
        state.update((dedup.dump(),))
        pdf["_generation"] = dedup.bloom.generation_of(pdf["_et"].to_numpy())
        pdf["_kind"] = np.where(keep, KIND_NEW, KIND_DUPLICATE)
        pdf["_detail"] = None
        if not emit_duplicates:
            pdf = pdf[keep]
        yield with_metrics_row(pdf[names], bucket, metrics.to_json())

    return routed.groupBy("_bucket").applyInPandasWithState(
        step, out_schema, _STATE_SCHEMA, "append", "NoTimeout"
    )
