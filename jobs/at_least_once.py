"""At-least-once delivery: Kafka -> Delta, rows written before the batch's offsets are committed.

Run::

    python -m jobs.at_least_once --profile local --topic events --out var/data/at_least_once
    spark-submit jobs/at_least_once.py --topic events        # via scripts/submit.sh

The job writes two outputs per micro-batch:

``events``
    A copy of every valid record (malformed ones go to ``quarantine``).
``ewma``
    An order-sensitive running aggregate kept in the sink: per user, the exponentially
    weighted moving average of ``amount`` (``ewma = alpha * amount + (1 - alpha) * ewma``,
    events folded in ``(event_time, event_id)`` order) and the number of events folded.

Guarantees: no record is lost; after a crash the restarted query replays the batch that was
written but not committed. A batch computes the same rows when it is replayed.
Does not guarantee: no duplicates. A crash after step 3 and before step 4 writes the replayed
batch again:

- ``events`` gets identical copies of the batch's rows: ``rollback-repeating``;
- ``ewma`` folds the batch's events into the state a second time, and an EWMA (like any
  non-idempotent fold) never returns to the clean value: ``rollback-divergent``.

Steps of one micro-batch (``foreachBatch``), with their crash points:

1. Append the valid rows to ``events``, the malformed ones to ``quarantine``.
2. Fold the batch into the ``ewma`` state: read the current state, fold per user, overwrite
   the table (one Delta commit).
3. Crash point ``at_least_once.after_write``.
4. Spark writes the batch to its commit log (the offsets are committed).
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
    """Fold one user's new events into its state row (if any); returns the new state row.

    ``rows`` holds at most one state row (``kind`` 0: ``ewma``, ``events``) and the user's
    events of the batch (``kind`` 1: ``amount``, ``event_time``, ``event_id``). Events are
    folded in ``(event_time, event_id)`` order, so a batch always folds the same way.
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
