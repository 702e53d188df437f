"""At-least-once delivery: Kafka -> Delta, rows written before the batch's offsets are committed.

Per batch: 1. append valid rows to ``events`` (malformed to ``quarantine``); 2. fold the batch
into ``ewma`` (per user, ``alpha * amount + (1 - alpha) * ewma`` in ``(event_time, event_id)``
order; one overwrite); 3. crash point ``at_least_once.after_write``, then Spark's commit log.
Guarantees: no record lost; a replayed batch computes the same rows. Does not guarantee: no
duplicates: a crash at the point rewrites the batch, ``events`` gets copies
(``rollback-repeating``) and ``ewma`` folds it twice (``rollback-divergent``).
"""

from __future__ import annotations

import pandas as pd
from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.streaming import StreamingQuery

from jobs.ingest_events import append_events
from jobs.startup import JobPaths, Under, job_parser, start_batches, start_job
from spark_ext.crash import declare
from spark_ext.operators.ewma import ewma

AFTER_WRITE = declare("at_least_once.after_write", "driver", "events written and folded")
EWMA_SCHEMA = "user_id STRING, ewma DOUBLE, events BIGINT"


class AtLeastOncePaths(JobPaths):
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


def fold_into(table: str, valid: DataFrame, alpha: float) -> None:
    """Fold ``valid`` into the ``ewma`` table at ``table`` (one overwrite commit)."""
    from delta.tables import DeltaTable

    spark = valid.sparkSession
    if DeltaTable.isDeltaTable(spark, table):
        state = spark.read.format("delta").load(table)
    else:
        state = spark.createDataFrame([], EWMA_SCHEMA)
    events = valid.select("user_id", "amount", "event_time", "event_id")
    rows = state.withColumn("kind", F.lit(0)).unionByName(
        events.withColumn("kind", F.lit(1)), allowMissingColumns=True
    )
    folded = rows.groupBy("user_id").applyInPandas(lambda r: fold_ewma(r, alpha), EWMA_SCHEMA)
    # Materialise before overwriting the table the state was read from.
    folded.localCheckpoint().write.format("delta").mode("overwrite").save(table)


def start(source: DataFrame, paths: AtLeastOncePaths, alpha: float = 0.5) -> StreamingQuery:
    """Start the query on ``source`` (a Kafka stream; ``availableNow``: it stops at its end):
    steps 1 to 3 of the module docstring per batch."""

    def write(batch: DataFrame, batch_id: int) -> None:
        batch = batch.persist()
        try:
            fold_into(str(paths.ewma), append_events(batch, paths.events, paths.quarantine), alpha)
            AFTER_WRITE.reached(batch_id)
        finally:
            batch.unpersist()

    return start_batches(source, write, paths.checkpoint, "at_least_once")


def main(argv: list[str] | None = None) -> int:
    parser = job_parser(__doc__.splitlines()[0], topic="events")
    parser.add_argument("--alpha", type=float, default=0.5, help="EWMA weight of a new event")
    args = parser.parse_args(argv)
    if not 0 < args.alpha <= 1:
        parser.error(f"--alpha must be in (0, 1], got {args.alpha}")
    job = start_job(args, "at_least_once")
    paths = AtLeastOncePaths(job.out)
    start(job.source(), paths, args.alpha).awaitTermination()
    job.print_tables("at_least_once", events=paths.events, ewma=paths.ewma)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
