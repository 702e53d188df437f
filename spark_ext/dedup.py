"""Bloom-fronted dedup catalog: exactly-once = at-least-once + deduplication.

Records are routed to a *bucket* by a stable hash of their record id (Spark's ``xxhash64``,
fixed seed, in :func:`deduplicate`; :func:`~spark_ext.bloom.stable_hash64` in the ordering
operator). Per bucket, Spark state holds only a :class:`~spark_ext.bloom.RotatingBloom`
(filters rotated by event time, so state is bounded). A record the filter has certainly not seen is new: no catalog lookup. Only on a
Bloom "maybe" is the exact, durable catalog asked (:class:`DeltaCatalog`, a Delta table of the
kept ids partitioned by generation and bucket, written by the sink in the same batch as the
output). State bytes are therefore ~1.2 bytes per id at a 1 % false-positive rate, where
Spark's ``dropDuplicates`` keeps every id in state.

Decision per bucket and micro-batch, in a total order (event time, then coordinates):

1. hash the ids (a stable 64-bit hash) and check-and-add them to the filter;
2. an id seen earlier *in this batch* is a duplicate (exact, in memory);
3. a Bloom "maybe" is looked up in the catalog: found with *other* coordinates -> duplicate;
   found with *its own* coordinates -> it is this very record, written by an earlier attempt
   of this batch that crashed before Spark's commit log (a replay): kept; not found -> a
   false positive: kept;
4. everything else is new: kept.

Replay safety: Spark restores the filter to the batch's starting version, the order is total,
and step 3's coordinate rule makes a lookup that sees this batch's own earlier catalog write
give the same answer as the first attempt. The sink writes catalog and output with
``txnAppId``/``txnVersion`` = (sink id, batch id) (DESIGN.md invariant 1).

Guarantees: no two output rows share a record id whose copies arrived within the retention
window (``generations * rotation_ms`` of event time); the copy kept is the first in the total
order. Does not guarantee: dedup of a copy arriving after its original's generation rotated
out of the filter and was purged from the catalog (it is then treated as new).
Coordinate columns must be strings or integers (they are compared as their string form).

Example
-------
>>> config = DedupConfig(catalog_path="/data/catalog", capacity=1_000_000, fp_rate=0.01)
>>> tagged = deduplicate(stream_df, config)                     # doctest: +SKIP
>>> sink = DedupSink(config, output_path="/data/out", sink_id="orders")   # doctest: +SKIP
>>> tagged.writeStream.foreachBatch(sink).option("checkpointLocation", cp).start()  # doctest: +SKIP
"""

from __future__ import annotations

import json
import logging
import math
import warnings
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, ClassVar

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.streaming.state import GroupState
from pyspark.sql.types import (
    BinaryType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
)

from spark_ext.bloom import RotatingBloom, stable_hash64
from spark_ext.crash import declare
from spark_ext.errors import ConfigError
from spark_ext.sinks.protocol import validate_sink_id

log = logging.getLogger(__name__)

#: Fault points of :class:`DedupSink`, reached after each durable write of a batch.
AFTER_CATALOG = declare("dedup.after_catalog", "driver", "kept ids in the catalog, output not yet")
AFTER_OUTPUT = declare("dedup.after_output", "driver", "output appended, filter state not saved")

#: Values of the ``_kind`` column of :func:`deduplicate`'s output.
KIND_NEW = "new"
KIND_DUPLICATE = "duplicate"
KIND_METRICS = "metrics"
#: Rows that arrived after their place in the order was released (ordering buffer only).
KIND_LATE = "late"

#: Schema of the catalog table.
CATALOG_SCHEMA = StructType(
    [
        StructField("generation", LongType()),
        StructField("bucket", IntegerType()),
        StructField("record_id", StringType()),
        StructField("coords", StringType()),
        StructField("batch_id", LongType()),
    ]
)


@dataclass(frozen=True)
class DedupConfig:
    """How to deduplicate.

    Parameters
    ----------
    catalog_path
        Folder of the exact catalog (a Delta table).
    capacity
        Distinct ids expected per rotation interval, over all buckets; sizes the filters.
    fp_rate
        Configured false-positive rate of each filter at ``capacity``.
    rotation_ms
        Event-time length of one filter generation.
    generations
        Generations kept; the dedup window is ``generations * rotation_ms`` of event time.
    buckets
        Number of buckets (groups of the stateful operator).
    id_column, event_time_column
        The record id (string) and the event time (timestamp) columns.
    coordinate_columns
        Columns that identify one delivery of a record (e.g. topic, partition, offset).
    """

    catalog_path: str
    capacity: int = 1_000_000
    fp_rate: float = 0.01
    rotation_ms: int = 3_600_000
    generations: int = 2
    buckets: int = 8
    id_column: str = "record_id"
    event_time_column: str = "event_time"
    coordinate_columns: tuple[str, ...] = ("topic", "partition", "offset")

    def __post_init__(self) -> None:
        if self.buckets < 1:
            raise ConfigError("dedup.buckets", f"must be >= 1, got {self.buckets}")
        if not self.coordinate_columns:
            raise ConfigError("dedup.coordinate_columns", "must name at least one column")
        self.new_bloom()  # validates capacity, fp_rate, rotation_ms, generations

    @property
    def capacity_per_bucket(self) -> int:
        return max(1, math.ceil(self.capacity / self.buckets))

    def new_bloom(self) -> RotatingBloom:
        return RotatingBloom(
            self.capacity_per_bucket, self.fp_rate, self.rotation_ms, self.generations
        )


@dataclass
class DedupMetrics:
    """Figures of one bucket and batch, of a whole batch, or of a run; replay-deterministic.

    Counters (``rows`` .. ``replayed_self``, ``late_rows``) count events and add up. Gauges
    (``state_bytes``, ``buffered_rows``) measure the state *after* a batch: the buckets of one
    batch add up (:meth:`of_buckets`), but batches do not -- ``a + b`` (a run total, ``b`` the
    later batch) keeps ``b``'s gauges. ``newest_generation`` is a maximum either way.
    """

    rows: int = 0
    bloom_negative: int = 0
    catalog_lookups: int = 0
    catalog_duplicates: int = 0
    batch_duplicates: int = 0
    false_positives: int = 0
    replayed_self: int = 0
    #: Gauge: bytes of the dedup (and buffer) state after the batch.
    state_bytes: int = 0
    #: Gauge: elements held by the ordering buffer after the batch.
    buffered_rows: int = 0
    late_rows: int = 0
    #: Newest filter generation seen (a maximum, not a sum, when metrics are added).
    newest_generation: int = -1

    #: The fields that measure state after a batch rather than count events.
    GAUGES: ClassVar[frozenset[str]] = frozenset({"state_bytes", "buffered_rows"})

    @property
    def lookups_avoided(self) -> float:
        """Share of rows the filter answered alone (no catalog lookup)."""
        return self.bloom_negative / self.rows if self.rows else 0.0

    @property
    def observed_fp_rate(self) -> float:
        """False positives among the rows not seen before (true negatives + false positives)."""
        negatives = self.bloom_negative + self.false_positives
        return self.false_positives / negatives if negatives else 0.0

    def _merged(self, other: DedupMetrics, sum_gauges: bool) -> DedupMetrics:
        a, b = asdict(self), asdict(other)
        merged = {
            k: a[k] + b[k] if sum_gauges or k not in self.GAUGES else b[k]
            for k in a
            if k != "newest_generation"
        }
        merged["newest_generation"] = max(self.newest_generation, other.newest_generation)
        return DedupMetrics(**merged)

    def __add__(self, other: DedupMetrics) -> DedupMetrics:
        """Run total: counters summed, gauges of ``other`` (the later batch)."""
        return self._merged(other, sum_gauges=False)

    @classmethod
    def of_buckets(cls, buckets: Iterable[DedupMetrics]) -> DedupMetrics:
        """The metrics of one batch from those of its buckets: everything summed."""
        total = cls()
        for m in buckets:
            total = total._merged(m, sum_gauges=True)
        return total

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> DedupMetrics:
        known = {f for f in cls.__dataclass_fields__}
        return cls(**{k: v for k, v in json.loads(text).items() if k in known})


def bucket_of(ids: Sequence[str] | np.ndarray, buckets: int) -> np.ndarray:
    """Bucket per id: stable hash modulo ``buckets`` (same in every process)."""
    return (stable_hash64(ids) % np.uint64(buckets)).astype(np.int32)


def coords_string(frame: pd.DataFrame, columns: Sequence[str]) -> pd.Series:
    """One string per row that identifies the delivery, e.g. ``"topic/2/1041"``."""
    out = frame[columns[0]].astype(str)
    for col in columns[1:]:
        out = out + "/" + frame[col].astype(str)
    return out


#: ``lookup(bucket, ids, min_generation) -> {record_id: coords}`` of the kept copies.
CatalogLookup = Callable[[int, list[str], int], dict[str, str]]


#: Catalog tables opened by this (Python worker) process, refreshed incrementally per lookup.
_OPEN_TABLES: dict[str, Any] = {}


class DeltaCatalog:
    """The exact, durable catalog: every kept id with the coordinates of its kept copy.

    A Delta table partitioned by ``generation`` and ``bucket``, appended by the sink with
    ``txnAppId``/``txnVersion`` (idempotent per batch), read with delta-rs by the stateful
    operator on a Bloom "maybe" only. Bounded by :meth:`purge` of generations older than the
    filters keep.
    """

    def __init__(self, path: str) -> None:
        self.path = path

    def lookup(self, bucket: int, ids: list[str], min_generation: int) -> dict[str, str]:
        """Coordinates of the kept copy of each of ``ids`` that the catalog holds."""
        from deltalake import DeltaTable
        from deltalake.exceptions import TableNotFoundError

        if not ids:
            return {}
        table = _OPEN_TABLES.get(self.path)
        try:
            if table is None:
                table = _OPEN_TABLES[self.path] = DeltaTable(self.path)
            else:
                table.update_incremental()  # reused Python worker: read only the new commits
        except TableNotFoundError:
            return {}
        dataset = table.to_pyarrow_dataset(partitions=[("bucket", "=", str(bucket))])
        found = dataset.to_table(
            columns=["record_id", "coords"],
            filter=(pc.field("generation") >= min_generation)
            & pc.field("record_id").isin(pa.array(ids, pa.string())),
        )
        return dict(
            zip(
                found.column("record_id").to_pylist(),
                found.column("coords").to_pylist(),
                strict=True,
            )
        )

    def append(self, kept: DataFrame, batch_id: int, app_id: str) -> None:
        """Append the catalog rows of ``kept`` (columns of :data:`CATALOG_SCHEMA`), once per batch."""
        (
            kept.select(*CATALOG_SCHEMA.fieldNames())
            .write.format("delta")
            .mode("append")
            .partitionBy("generation", "bucket")
            .option("txnAppId", app_id)
            .option("txnVersion", batch_id)
            .save(self.path)
        )

    def purge(self, older_than_generation: int) -> None:
        """Delete the ids of generations the filters no longer keep (bounds the catalog)."""
        from deltalake import DeltaTable
        from deltalake.exceptions import TableNotFoundError

        try:
            DeltaTable(self.path).delete(f"generation < {int(older_than_generation)}")
        except TableNotFoundError:
            return


@dataclass
class BucketDedup:
    """The dedup decision of one bucket: the filter, and the catalog asked on "maybe"."""

    config: DedupConfig
    bucket: int
    bloom: RotatingBloom = field(init=False)

    def __post_init__(self) -> None:
        self.bloom = self.config.new_bloom()

    def load(self, state: bytes | None) -> None:
        if state:
            self.bloom.load_bytes(state)

    def dump(self) -> bytes:
        return self.bloom.to_bytes()

    def decide(
        self,
        ids: np.ndarray,
        event_time_ms: np.ndarray,
        coords: Sequence[str] | Callable[[np.ndarray], Sequence[str]],
        lookup: CatalogLookup,
        hashes: np.ndarray | None = None,
    ) -> tuple[np.ndarray, DedupMetrics]:
        """Keep-mask for rows given in their total order (steps 1-4 of the module docstring).

        ``coords`` are the rows' coordinate strings, or a function giving them for an array of
        row positions (called only for the few rows looked up). ``hashes`` are the ids'
        :func:`~spark_ext.bloom.stable_hash64` values when the caller has them already.
        """
        n = len(ids)
        metrics = DedupMetrics(rows=n)
        if n == 0:
            metrics.state_bytes = self.bloom.nbytes
            return np.zeros(0, dtype=bool), metrics
        if hashes is None:
            hashes = stable_hash64(ids)
        maybe = self.bloom.check_and_add(hashes, np.asarray(event_time_ms))
        in_batch_dup = pd.Series(ids).duplicated(keep="first").to_numpy()
        ask = maybe & ~in_batch_dup
        keep = ~in_batch_dup
        asked_ids = [str(x) for x in ids[ask]]
        floor = self.bloom.oldest_kept
        found = lookup(self.bucket, asked_ids, floor if floor is not None else 0)
        asked = np.flatnonzero(ask)
        if callable(coords):
            asked_coords = list(coords(asked)) if len(asked) else []
        else:
            asked_coords = [coords[int(i)] for i in asked]
        for i, mine in zip(asked, asked_coords, strict=True):
            stored = found.get(str(ids[i]))
            if stored is None:
                metrics.false_positives += 1
            elif stored == mine:
                metrics.replayed_self += 1
            else:
                keep[i] = False
                metrics.catalog_duplicates += 1
        metrics.bloom_negative = int((~maybe & ~in_batch_dup).sum())
        metrics.catalog_lookups = int(ask.sum())
        metrics.batch_duplicates = int(in_batch_dup.sum())
        metrics.state_bytes = self.bloom.nbytes
        newest = self.bloom.newest
        metrics.newest_generation = -1 if newest is None else newest
        return keep, metrics


# -- the Spark operator ----------------------------------------------------------------------

_STATE_SCHEMA = StructType([StructField("bloom", BinaryType())])
_EXTRA = [
    StructField("_kind", StringType()),
    StructField("_bucket", IntegerType()),
    StructField("_generation", LongType()),
    StructField("_detail", StringType()),
]


def _event_time_ms(series: pd.Series) -> np.ndarray:
    values = pd.to_datetime(series, utc=True)
    return (values.astype("int64") // 1_000_000).to_numpy()


def deduplicate(df: DataFrame, config: DedupConfig, emit_duplicates: bool = False) -> DataFrame:
    """Tag a streaming DataFrame with the Bloom + catalog decision, bucket by bucket.

    The result has ``df``'s columns plus ``_kind`` (``"new"``; ``"duplicate"`` only with
    ``emit_duplicates``; one ``"metrics"`` row per bucket and batch whose ``_detail`` is
    :class:`DedupMetrics` as JSON), ``_bucket`` and ``_generation``. Write it with
    a :class:`DedupSink` (which also feeds the catalog); rows are not final before that.
    """
    for col in (config.id_column, config.event_time_column, *config.coordinate_columns):
        if col not in df.columns:
            raise ConfigError("dedup.columns", f"column {col!r} is not in {df.columns}")
    out_schema = StructType([*df.schema.fields, *_EXTRA])
    names = out_schema.fieldNames()
    catalog = DeltaCatalog(config.catalog_path)
    buckets = config.buckets
    id_col, et_col, coord_cols = (
        config.id_column,
        config.event_time_column,
        list(config.coordinate_columns),
    )

    # Spark's xxhash64 (fixed seed 42, the same in every JVM) routes and feeds the filter:
    # no Python stage before the shuffle, and no second hash of the id in the operator.
    id_hash = F.xxhash64(F.col(id_col).cast("string"))
    routed = df.withColumn("_hash", id_hash).withColumn(
        "_bucket", F.pmod(F.col("_hash"), F.lit(buckets)).cast("int")
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
            catalog.lookup,
            hashes=pdf["_hash"].to_numpy().view(np.uint64),
        )
        state.update((dedup.dump(),))
        pdf["_generation"] = dedup.bloom.generation_of(pdf["_et"].to_numpy())
        pdf["_kind"] = np.where(keep, KIND_NEW, KIND_DUPLICATE)
        pdf["_detail"] = None
        if not emit_duplicates:
            pdf = pdf[keep]
        metrics_row: dict[str, Any] = {c: None for c in names}
        metrics_row.update(
            _kind=KIND_METRICS, _bucket=bucket, _detail=metrics.to_json(), _generation=None
        )
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)  # all-null columns of the row
            out = pd.concat([pdf[names], pd.DataFrame([metrics_row])[names]], ignore_index=True)
        yield out

    return routed.groupBy("_bucket").applyInPandasWithState(
        step, out_schema, _STATE_SCHEMA, "append", "NoTimeout"
    )


class DedupSink:
    """``foreachBatch`` sink of tagged rows: catalog, output, quarantine; idempotent per batch.

    Takes the output of :func:`deduplicate` or :func:`spark_ext.ordering.order_and_fold`.
    Steps per batch (crash points ``dedup.<step>`` in between):

    1. persist the tagged batch (the stateful operator runs once) and read its metrics rows;
    2. append the kept ids to the catalog with ``txn(<sink id>.catalog, batch_id)``
       (skipped without a ``config``: no dedup, no catalog);
    3. append the kept rows to ``output_path`` with ``txn(sink_id, batch_id)``;
    4. append late rows (if any) to ``quarantine_path`` with ``txn(<sink id>.late, batch_id)``;
    5. purge catalog generations the filters no longer keep (any time is safe: lookups ignore
       them anyway), fold the metrics into :attr:`metrics` and log them.

    Spark re-runs a batch whose commit-log entry is missing; steps 2-4 are then skipped by
    Delta (same app id and version), and the operator's catalog rule keeps the decision.
    """

    def __init__(
        self,
        config: DedupConfig | None,
        output_path: str,
        sink_id: str,
        output_columns: Sequence[str] | None = None,
        quarantine_path: str | None = None,
    ) -> None:
        self.config = config
        self.output_path = output_path
        self.sink_id = validate_sink_id(sink_id)
        self.output_columns = list(output_columns) if output_columns else None
        self.quarantine_path = quarantine_path
        self.catalog = DeltaCatalog(config.catalog_path) if config else None
        self.metrics = DedupMetrics()
        self.batches: list[DedupMetrics] = []
        self._purged_below = 0

    @property
    def catalog_app_id(self) -> str:
        """``txnAppId`` of the catalog appends: ``<sink id>.catalog``."""
        return f"{self.sink_id}.catalog"

    @property
    def late_app_id(self) -> str:
        """``txnAppId`` of the late-row appends: ``<sink id>.late``."""
        return f"{self.sink_id}.late"

    def _append(self, df: DataFrame, path: str, app_id: str, batch_id: int) -> None:
        (
            df.write.format("delta")
            .mode("append")
            .option("txnAppId", app_id)
            .option("txnVersion", batch_id)
            .save(path)
        )

    def __call__(self, batch: DataFrame, batch_id: int) -> None:
        batch = batch.persist()
        try:
            metrics = DedupMetrics.of_buckets(
                DedupMetrics.from_json(r["_detail"])
                for r in batch.where(F.col("_kind") == KIND_METRICS).select("_detail").collect()
            )
            kept = batch.where(F.col("_kind") == KIND_NEW)
            if self.catalog is not None and self.config is not None:
                self.catalog.append(
                    kept.select(
                        F.col("_generation").alias("generation"),
                        F.col("_bucket").alias("bucket"),
                        F.col(self.config.id_column).cast("string").alias("record_id"),
                        F.concat_ws(
                            "/", *[F.col(c).cast("string") for c in self.config.coordinate_columns]
                        ).alias("coords"),
                        F.lit(batch_id).cast("long").alias("batch_id"),
                    ),
                    batch_id,
                    self.catalog_app_id,
                )
                AFTER_CATALOG.reached(batch_id)
            columns = self.output_columns or [c for c in batch.columns if not c.startswith("_")]
            self._append(kept.select(*columns), self.output_path, self.sink_id, batch_id)
            AFTER_OUTPUT.reached(batch_id)
            if self.quarantine_path and metrics.late_rows:
                late = batch.where(F.col("_kind") == KIND_LATE).select(*columns)
                self._append(late, self.quarantine_path, self.late_app_id, batch_id)
        finally:
            batch.unpersist()
        if self.catalog is not None and self.config is not None:
            floor = metrics.newest_generation - self.config.generations + 1
            if floor > self._purged_below:
                self.catalog.purge(floor)
                self._purged_below = floor
        self.metrics = self.metrics + metrics
        self.batches.append(metrics)
        log.info(
            "batch %s: %s rows, lookups avoided %.1f%%, observed FP %.4f, state %s bytes, "
            "buffered %s",
            batch_id,
            metrics.rows,
            100 * metrics.lookups_avoided,
            metrics.observed_fp_rate,
            metrics.state_bytes,
            metrics.buffered_rows,
        )
