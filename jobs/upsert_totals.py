"""Running totals per user, upserted (Delta MERGE) at least once: repeats, then converges.

Per batch: Spark's stateful aggregation gives the touched users' totals (integer cents); they
are MERGEd into ``totals`` and appended to the change feed ``changes`` (point
``upsert_totals.after_upsert``); Spark's commit log. Guarantees: ``totals`` is ``precise``
(absolute values, idempotent upsert). ``changes`` is ``rollback-convergent``: a replay appends
again and a catch-up restart publishes other intermediate totals, but each user's last change
is the clean total. Does not guarantee: the clean run's intermediate totals in ``changes``.
"""

from __future__ import annotations

import logging
import sys
from pathlib import Path

import pandas as pd
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from jobs.exactly_once_delta import events_stream
from jobs.startup import job_parser, print_tables, start_batches, start_job
from spark_ext.crash import declare

log = logging.getLogger(__name__)

AFTER_UPSERT = declare(
    "upsert_totals.after_upsert", "driver", "totals merged and changes appended, no commit log"
)

#: Columns of both outputs (``changes`` adds ``batch_id``).
TOTAL_COLUMNS = ("user_id", "events", "total_cents")


def running_totals(events: DataFrame) -> DataFrame:
    """Per user, the count and the sum of amounts in cents of every valid event so far."""
    valid = events.where(F.col("user_id").isNotNull() & F.col("amount").isNotNull())
    return valid.groupBy("user_id").agg(
        F.count(F.lit(1)).alias("events"),
        F.sum(F.round(F.col("amount") * 100).cast("long")).alias("total_cents"),
    )


class UpsertWriter:
    """The ``foreachBatch`` function: step 2 of the module docstring, on the driver."""

    def __init__(self, out: Path) -> None:
        self.totals = out / "totals"
        self.changes = out / "changes"

    def __call__(self, batch: DataFrame, batch_id: int) -> None:
        import pyarrow as pa
        from deltalake import DeltaTable, write_deltalake

        frame: pd.DataFrame = batch.select(*TOTAL_COLUMNS).toPandas()
        frame = frame.sort_values("user_id")
        if frame.empty:
            return
        frame["events"] = frame["events"].astype("int64")
        frame["total_cents"] = frame["total_cents"].astype("int64")
        source = pa.Table.from_pandas(frame, preserve_index=False)
        if DeltaTable.is_deltatable(str(self.totals)):
            (
                DeltaTable(str(self.totals))
                .merge(source, "t.user_id = s.user_id", source_alias="s", target_alias="t")
                .when_matched_update_all()
                .when_not_matched_insert_all()
                .execute()
            )
        else:
            write_deltalake(str(self.totals), source)
        changes = source.append_column("batch_id", pa.array([batch_id] * len(frame), pa.int64()))
        write_deltalake(str(self.changes), changes, mode="append")
        AFTER_UPSERT.reached(batch_id)


def main(argv: list[str] | None = None) -> int:
    args = job_parser(__doc__.splitlines()[0], topic="events").parse_args(argv)
    job = start_job(args, "upsert_totals")
    events = events_stream(job.spark, job.bootstrap, args.topic, args.max_offsets_per_trigger)
    writer = UpsertWriter(job.out)
    totals = running_totals(events)
    start_batches(totals, writer, job.out / "_checkpoint", output_mode="update").awaitTermination()
    print_tables(job.spark, "upsert_totals", totals=job.out / "totals", changes=job.out / "changes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
