"""Dedup decided per bucket on the executors, in front of the two-phase Delta sink: the
``foreachBatch`` sink :class:`DeltaDedupSink` (same :class:`~spark_ext.dedup.DedupConfig` as
:mod:`spark_ext.dedup`; design, owner and replays: docs/design.md, "Dedup"). Steps of
:data:`~connectors.delta.dedup_staging.DEDUP_DELTA`:

1. ``staged`` (tasks, :func:`connectors.delta.dedup_staging.decider`): rows shuffled to their
   bucket and decided, kept rows and catalog rows staged, the bucket's filters saved;
2. ``cataloged``: one delta-rs commit of the catalog files with ``txn(<sink id>:catalog, N)``;
3. ``written``: one delta-rs commit of the output files with ``txn(<sink id>, N)``;
4. ``cleaned``: staged files no commit took removed, old generations purged.
"""

from __future__ import annotations

__all__ = ["BucketResult", "DeltaDedupSink"]

import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import StringType, TimestampNTZType, TimestampType

from connectors.delta.dedup_staging import (
    DEDUP_DELTA,
    MESSAGE_SCHEMA,
    CatalogFile,
    catalog_file_tag,
    clean_catalog,
    commit_catalog,
    decider,
)
from connectors.delta.idempotent import DeltaIdempotentWriter
from connectors.delta.staging import StagedFile
from connectors.delta.table import ensure_table, schema_shape
from connectors.delta.two_phase import DeltaCommitter
from spark_ext.dedup.bucket import KEY_ET, KEY_HASH, KEY_ID, REASON_NULL_KEY
from spark_ext.dedup.catalog import CATALOG_SCHEMA, DedupCatalog
from spark_ext.dedup.config import DedupConfig
from spark_ext.dedup.errors import DedupInputError
from spark_ext.dedup.metrics import DedupMetrics
from spark_ext.dedup.state import BucketStateStore
from spark_ext.errors import ConfigError
from spark_ext.sinks.delta_txn import marker_app_id
from spark_ext.sinks.owner import OwnerDecision, SinkOwner, owner_of
from spark_ext.sinks.protocol import check_batch_order, commit_batch
from spark_ext.storage import Location, StorageSettings, exists

log = logging.getLogger(__name__)

#: The column that sends each row to the task of its bucket (see :func:`_route_keys`).
ROUTE = "_dedup_route"


@dataclass(frozen=True)
class BucketResult:
    """What the driver gets back for one bucket of a batch: names, sizes, counts, metrics."""

    bucket: int
    output: StagedFile
    catalog: tuple[CatalogFile, ...]
    null_rows: int
    metrics: DedupMetrics


def _route_keys(spark: SparkSession, buckets: int) -> list[int]:
    """For each bucket ``b``, an int whose Spark hash partitioning into ``buckets`` partitions
    is partition ``b`` (``pmod(hash(v), buckets) == b``): one bucket per task, none doubled."""
    found = (
        spark.range(0, 64 * buckets + 64)
        .select(F.col("id").cast("int").alias("v"))
        .select("v", F.expr(f"pmod(hash(v), {buckets})").alias("p"))
        .groupBy("p")
        .agg(F.min("v").alias("v"))
        .collect()
    )
    by_partition = {int(r["p"]): int(r["v"]) for r in found}
    return [by_partition.get(b, b) for b in range(buckets)]


class DeltaDedupSink:
    """``foreachBatch`` sink: Bloom-fronted dedup decided per bucket in tasks, output to Delta.

    ``sink_id`` keys ``txn(sink_id, batch)`` on ``output_path`` and
    ``txn(<sink_id>:catalog, batch)`` on ``config.catalog_path``; ``state_path`` holds the
    filters' versions (with the query's checkpoint); rows with a null id, event time or
    coordinate go to ``quarantine_path`` with ``_reason`` (none given:
    :class:`DedupInputError`); ``owner`` and ``take_over`` as for the other ``foreachBatch``
    sinks (docs/design.md, "Delta sinks"); ``storage``: the profile's ``[storage]`` for an
    output on object storage (docs/design.md, "Object storage"). Paths must be reachable from
    driver and executors.

    >>> sink = DeltaDedupSink(DedupConfig(catalog_path="var/o/_catalog"), "var/o/unique", "orders",
    ...                       "var/o/_dedup_state")  # doctest: +SKIP
    """

    def __init__(
        self,
        config: DedupConfig,
        output_path: str | Path,
        sink_id: str,
        state_path: str | Path,
        quarantine_path: str | Path | None = None,
        output_columns: Sequence[str] | None = None,
        *,
        owner: SinkOwner | None = None,
        take_over: bool = False,
        storage: StorageSettings | None = None,
    ) -> None:
        self.config = config
        # of output, state and catalog; reaches the tasks inside :func:`decider`'s function
        self.storage = storage or config.storage
        self.output_path = str(output_path)
        self.catalog = DedupCatalog(config.catalog_path, self.storage)
        self.catalog_marks = self.catalog.appender(sink_id, take_over, spark_writes=False)
        self.sink_id = self.catalog_marks.sink_id  # validated there
        self.state = BucketStateStore(
            Location.parse(state_path).join("filters"), settings=self.storage
        )
        self.quarantine_path = str(quarantine_path) if quarantine_path else None
        self.output_columns = list(output_columns) if output_columns else None
        self.metrics = DedupMetrics()
        self.batches: list[DedupMetrics] = []
        self.last_results: list[BucketResult] = []  # the last batch's, one per bucket with rows
        self.owner = owner
        self.take_over = take_over
        self._recovered: SinkOwner | None = None
        self._output: DeltaCommitter | None = None
        self._quarantine: DeltaIdempotentWriter | None = None
        self._routes: list[int] | None = None

    def _key_columns(self) -> list[str]:
        c = self.config
        return [c.id_column, c.event_time_column, *c.coordinate_columns]

    def _committer(self, owner: SinkOwner | None = None) -> DeltaCommitter:
        """The output's committer, one per run (every commit checks the epoch and owner of
        :meth:`_start`'s fence)."""
        if self._output is None or (owner is not None and self._output.owner != owner):
            self._output = DeltaCommitter(
                self.output_path,
                self.sink_id,
                owner=owner,
                take_over=self.take_over,
                settings=self.storage,
            )
        return self._output

    def _columns(self, batch: DataFrame) -> list[str]:
        columns = self.output_columns or batch.columns
        missing = [x for x in {*self._key_columns(), *columns} if x not in batch.columns]
        if missing:
            raise ConfigError("dedup.columns", f"columns {missing} are not in {batch.columns}")
        return columns

    def _output_exists(self) -> bool:
        """Whether the output table has a log yet."""
        return exists(Location.parse(self.output_path).join("_delta_log"), self.storage)

    def _decide_owner(self, owner: SinkOwner) -> bool:
        """Decide the owner on the output and the catalog before anything is written (a
        stranger: :class:`~spark_ext.sinks.errors.SinkOwnerError`); whether it takes over."""
        decisions: list[OwnerDecision | None] = [self.catalog_marks.decide(owner)]
        if self._output_exists():
            output = self._committer(owner)
            decisions.append(output._decide(output._table()))
        return OwnerDecision.TAKE_OVER in decisions

    def _start(self, batch: DataFrame, columns: list[str], owner: SinkOwner) -> None:
        """At the first batch of a run: create the output, record the owner, drop orphans."""
        ensure_table(self.output_path, batch.select(*columns).schema, self.storage)
        self.catalog_marks.claim(owner, CATALOG_SCHEMA)
        self._committer(owner).recover(fence=True)
        clean_catalog(self.config.catalog_path, catalog_file_tag(self.sink_id), None, self.storage)
        self._routes = _route_keys(batch.sparkSession, self.config.buckets)
        self._quarantine = None  # made with this run's owner when first needed
        self._recovered = owner

    def _check_batch_order(self, batch_id: int) -> bool:
        """Whether output and catalog both recorded this batch (below either's:
        ``BatchRegressionError`` before anything is staged)."""
        output = self._committer().last_committed_batch() if self._output_exists() else None
        done = check_batch_order(self.sink_id, batch_id, output)
        marker = self.catalog_marks.marker
        return check_batch_order(marker, batch_id, self.catalog.last_batch(marker)) and done

    def __call__(self, batch: DataFrame, batch_id: int) -> None:
        c = self.config
        columns = self._columns(batch)
        owner = owner_of(batch, self.owner, f"DeltaDedupSink({self.sink_id!r})")
        if self._recovered != owner:
            taking_over = self._decide_owner(owner)
            replay = False if taking_over else self._check_batch_order(batch_id)
            self._start(batch, columns, owner)
        else:
            replay = self._check_batch_order(batch_id)
        if replay:
            log.info(
                "%s batch %d: output and catalog have it (replay), skipped", self.sink_id, batch_id
            )
            return

        # 1. in the tasks: decide each bucket, stage output and catalog rows, save filters.
        results = self._decide(batch, columns, batch_id)
        self.last_results = results
        outputs = [r.output for r in results]
        nulls = sum(r.null_rows for r in results)
        if nulls:
            self._quarantine_nulls(batch, batch_id, nulls, outputs)

        # 2. the catalog: one delta-rs commit with txn(<sink id>:catalog, batch id).
        files = [f for r in results for f in r.catalog]
        if not commit_catalog(c.catalog_path, self.sink_id, batch_id, files, owner, self.storage):
            log.info("%s batch %d: catalog already has it (replay)", self.sink_id, batch_id)
        DEDUP_DELTA.reached(2, batch_id)

        # 3. the output: one delta-rs commit with txn(sink id, batch id).
        commit_batch(self._committer(), batch_id, outputs)
        DEDUP_DELTA.reached(3, batch_id)

        # 4. leftovers of the batch, and the catalog's generations outside the window.
        clean_catalog(c.catalog_path, catalog_file_tag(self.sink_id), batch_id, self.storage)
        metrics = DedupMetrics.of_buckets(r.metrics for r in results)
        self.catalog.purge_outside(metrics.newest_generation, c.generations)
        DEDUP_DELTA.reached(4, batch_id)

        self.metrics = self.metrics + metrics
        self.batches.append(metrics)
        log.info("%s batch %s: %s", self.sink_id, batch_id, metrics)

    # -- step 1 ----------------------------------------------------------------------------
    def _decide(self, batch: DataFrame, columns: list[str], batch_id: int) -> list[BucketResult]:
        c = self.config
        types = {f.name: f.dataType for f in batch.schema.fields}
        record_id = F.col(c.id_column).cast("string")
        extra = [F.xxhash64(record_id).alias(KEY_HASH)]
        # The id and event time travel once: as they are when they already are a string and
        # a timestamp (the event time's microseconds are read in the task), else converted.
        id_source, et_source = c.id_column, c.event_time_column
        if not isinstance(types[c.id_column], StringType):
            extra.append(record_id.alias(KEY_ID))
            id_source = KEY_ID
        if not isinstance(types[c.event_time_column], (TimestampType, TimestampNTZType)):
            extra.append(F.col(c.event_time_column).cast("timestamp").alias(KEY_ET))
            et_source = KEY_ET
        out_schema = batch.select(*columns).schema
        decide = decider(
            c,
            self.output_path,
            self.sink_id,
            out_schema,
            batch_id,
            str(self.state.root),
            (id_source, et_source, *c.coordinate_columns),
            self._recovered.code if self._recovered else None,
            self.storage,
        )
        routes = F.array(*[F.lit(v) for v in self._routes or range(c.buckets)])
        bucket = F.pmod(F.col(KEY_HASH), F.lit(c.buckets)).cast("int")
        source = (
            batch.select(
                *[F.col(x) for x in dict.fromkeys([*columns, *self._key_columns()])], *extra
            )
            .withColumn(ROUTE, F.element_at(routes, bucket + 1))
            .repartition(c.buckets, ROUTE)
        )
        rows_json = out_schema.json()
        shape = schema_shape(rows_json)
        results = [
            BucketResult(
                r["bucket"],
                StagedFile(
                    r["path"], r["size"], r["rows"], batch_id, r["bucket"], shape, rows_json
                ),
                tuple(CatalogFile(*f) for f in json.loads(r["catalog"])),
                r["null_rows"],
                DedupMetrics.from_json(r["metrics"]),
            )
            for r in source.mapInArrow(decide, MESSAGE_SCHEMA).collect()
        ]
        return sorted(results, key=lambda r: r.bucket)

    def _quarantine_nulls(
        self, batch: DataFrame, batch_id: int, count: int, staged: list[StagedFile]
    ) -> None:
        keys = self._key_columns()
        if self.quarantine_path is None:
            self._committer().clean(batch_id, staged, committed=False)
            tag = catalog_file_tag(self.sink_id)
            clean_catalog(self.config.catalog_path, tag, batch_id, self.storage)
            raise DedupInputError(
                f"batch {batch_id}: {count} rows have a null in {keys}; give the sink a "
                "quarantine_path to keep them aside"
            )
        valid = F.lit(True)
        for k in keys:
            valid = valid & F.col(k).isNotNull()
        reason = F.concat(
            F.lit(REASON_NULL_KEY + ":"),
            F.concat_ws(",", *[F.when(F.col(k).isNull(), F.lit(k)) for k in keys]),
        )
        if self._quarantine is None:
            self._quarantine = DeltaIdempotentWriter(
                self.quarantine_path,
                self.sink_id,
                owner=self._recovered,
                take_over=self.take_over,
                marker=marker_app_id(self.sink_id, "quarantine"),
                settings=self.storage,
            )
        self._quarantine(batch.where(~valid).withColumn("_reason", reason), batch_id)
        log.warning("%s batch %d: %d rows quarantined (null key)", self.sink_id, batch_id, count)
