"""At-least-once delivery: Kafka -> Delta, rows written before the batch's offsets are committed.

Per batch: append valid rows to ``events`` (malformed to ``quarantine``), fold the batch into
``ewma`` (per user, ``alpha * amount + (1 - alpha) * ewma`` in ``(event_time, event_id)``
order; one overwrite), crash point ``at_least_once.after_write``, then Spark's commit log.
Guarantees: no record lost; a replayed batch computes the same rows. Does not guarantee: no
duplicates: a crash at the point rewrites the batch, ``events`` gets copies
(``rollback-repeating``) and ``ewma`` folds it twice (``rollback-divergent``).
"""

from __future__ import annotations

import logging
import sys
from dataclasses import dataclass

import pandas as pd
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming import StreamingQuery
from pyspark.sql.types import DoubleType, LongType, StringType, StructField, StructType

from connectors import kafka
from jobs.ingest_events import CONTRACT
from jobs.startup import JobPaths, Under, job_parser, print_tables, start_batches, start_job
from spark_ext.crash import declare
from spark_ext.operators.ewma import ewma
from spark_ext.quarantine import parse_json

log = logging.getLogger(__name__)

AFTER_WRITE = declare("at_least_once.after_write", "driver", "events written and folded")

#: The columns of the ``events`` table.
EVENT_COLUMNS = ("event_id", "user_id", "amount", "event_time", "partition", "offset")

EWMA_SCHEMA = StructType(
    [
        StructField("user_id", StringType()),
        StructField("ewma", DoubleType()),
        StructField("events", LongType()),
    ]
)


@dataclass(frozen=True)
class AtLeastOncePaths(JobPaths):
    """The job's tables and Spark's checkpoint, under one folder."""

    events = Under("events")
    quarantine = Under("quarantine")
    ewma = Under("ewma")


def fold_ewma(rows: pd.DataFrame, alpha: float) -> pd.DataFrame:
    """Fold one user's state row (``kind`` 0, if any) and batch events (``kind`` 1); returns the
    new state row. Events fold in ``(event_time, event_id)`` order.
    """
    state = rows[rows["kind"] == 0]
    before = float(state["ewma"].iloc[0]) if len(state) else None
    count = int(state["events"].iloc[0]) if len(state) else 0
    events = rows[rows["kind"] == 1].sort_values(["event_time", "event_id"])
    folded = ewma(events["amount"].to_numpy(dtype=float), alpha, before)
    after = float(folded[-1]) if len(folded) else before
    return pd.DataFrame(
        {"user_id": [rows["user_id"].iloc[0]], "ewma": [after], "events": [count + len(folded)]}
    )


class AtLeastOnceWriter:
    """The ``foreachBatch`` function: steps 1 to 3 of the module docstring."""

    def __init__(self, spark: SparkSession, paths: AtLeastOncePaths, alpha: float) -> None:
        self.spark = spark
        self.paths = paths
        self.alpha = alpha

    def __call__(self, batch: DataFrame, batch_id: int) -> None:
        batch = batch.persist()
        try:
            parsed = parse_json(batch, CONTRACT)
            valid = parsed.valid.select(*EVENT_COLUMNS)
            valid.write.format("delta").mode("append").save(str(self.paths.events))  # step 1
            parsed.quarantine.write.format("delta").mode("append").save(str(self.paths.quarantine))
            self.fold(valid)  # step 2
            AFTER_WRITE.reached(batch_id)  # step 3
        finally:
            batch.unpersist()

    def current_state(self) -> DataFrame:
        from delta.tables import DeltaTable

        if DeltaTable.isDeltaTable(self.spark, str(self.paths.ewma)):
            return self.spark.read.format("delta").load(str(self.paths.ewma))
        return self.spark.createDataFrame([], EWMA_SCHEMA)

    def fold(self, valid: DataFrame) -> None:
        """Fold ``valid`` into the ``ewma`` table (one overwrite commit)."""
        state = self.current_state().select(
            "user_id",
            F.lit(0).alias("kind"),
            "ewma",
            "events",
            F.lit(None).cast("double").alias("amount"),
            F.lit(None).cast("timestamp").alias("event_time"),
            F.lit(None).cast("string").alias("event_id"),
        )
        events = valid.select(
            "user_id",
            F.lit(1).alias("kind"),
            F.lit(None).cast("double").alias("ewma"),
            F.lit(None).cast("long").alias("events"),
            "amount",
            "event_time",
            "event_id",
        )
        alpha = self.alpha

        def fold(rows: pd.DataFrame) -> pd.DataFrame:
            return fold_ewma(rows, alpha)

        # Materialise before overwriting the table the state was read from.
        new_state = (
            state.unionByName(events).groupBy("user_id").applyInPandas(fold, EWMA_SCHEMA)
        ).localCheckpoint()
        new_state.write.format("delta").mode("overwrite").save(str(self.paths.ewma))


def start(
    spark: SparkSession,
    bootstrap: str,
    topic: str,
    paths: AtLeastOncePaths,
    max_offsets_per_trigger: int | None = None,
    alpha: float = 0.5,
) -> StreamingQuery:
    """Start the query (``availableNow``: it stops when the topic is read to its end)."""
    source = kafka.read_stream(
        spark, bootstrap, topic, max_offsets_per_trigger=max_offsets_per_trigger
    )
    writer = AtLeastOnceWriter(spark, paths, alpha)
    return start_batches(source, writer, paths.checkpoint, "at_least_once")


def main(argv: list[str] | None = None) -> int:
    parser = job_parser(__doc__.splitlines()[0], topic="events")
    parser.add_argument("--alpha", type=float, default=0.5, help="EWMA weight of a new event")
    args = parser.parse_args(argv)
    if not 0 < args.alpha <= 1:
        parser.error(f"--alpha must be in (0, 1], got {args.alpha}")
    job = start_job(args, "at_least_once")
    spark, paths = job.spark, AtLeastOncePaths(job.out)
    query = start(
        spark,
        job.bootstrap,
        args.topic,
        paths,
        args.max_offsets_per_trigger,
        args.alpha,
    )
    query.awaitTermination()
    print_tables(spark, "at_least_once", events=paths.events, ewma=paths.ewma)
    return 0


if __name__ == "__main__":
    sys.exit(main())
