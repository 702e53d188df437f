"""Running totals per user, upserted (Delta MERGE) at least once: repeats, then converges.

Per batch: Spark's stateful aggregation gives the touched users' totals (integer cents); they
are MERGEd into ``totals`` and appended to the change feed ``changes`` (point
``upsert_totals.after_upsert``); Spark's commit log. Guarantees: ``totals`` is ``precise``
(absolute values, idempotent upsert). ``changes`` is ``rollback-convergent``: a replay appends
again and a catch-up restart publishes other intermediate totals, but each user's last change
is the clean total. Does not guarantee: the clean run's intermediate totals in ``changes``.
"""

from __future__ import annotations

import functools

import pandas as pd
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from jobs.exactly_once_delta import parse_events
from jobs.startup import job_parser, start_batches, start_job, under
from spark_ext import storage
from spark_ext.crash import declare

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


def upsert(out: str, batch: DataFrame, batch_id: int) -> None:
    """The ``foreachBatch`` function: MERGE into ``out/totals``, append to ``out/changes``, on
    the driver."""
    import pyarrow as pa
    from deltalake import DeltaTable, write_deltalake

    settings = storage.session_settings(batch.sparkSession)
    totals, options = storage.delta_storage(under(out, "totals"), settings)
    changes_uri = storage.delta_storage(under(out, "changes"), settings)[0]
    frame: pd.DataFrame = batch.select(*TOTAL_COLUMNS).toPandas()
    frame = frame.sort_values("user_id")
    if frame.empty:
        return
    frame = frame.astype({"events": "int64", "total_cents": "int64"})
    source = pa.Table.from_pandas(frame, preserve_index=False)
    if DeltaTable.is_deltatable(totals, options):
        (
            DeltaTable(totals, storage_options=options)
            .merge(source, "t.user_id = s.user_id", source_alias="s", target_alias="t")
            .when_matched_update_all()
            .when_not_matched_insert_all()
            .execute()
        )
    else:
        write_deltalake(totals, source, storage_options=options)
    changes = source.append_column("batch_id", pa.array([batch_id] * len(frame), pa.int64()))
    write_deltalake(changes_uri, changes, mode="append", storage_options=options)
    AFTER_UPSERT.reached(batch_id)


def main(argv: list[str] | None = None) -> int:
    args = job_parser(__doc__.splitlines()[0], topic="events").parse_args(argv)
    job = start_job(args, "upsert_totals")
    totals = running_totals(parse_events(job.source()))
    write = functools.partial(upsert, job.out)
    checkpoint = under(job.out, "_checkpoint")
    start_batches(totals, write, checkpoint, output_mode="update").awaitTermination()
    tables = {name: under(job.out, name) for name in ("totals", "changes")}
    job.print_tables("upsert_totals", **tables)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
