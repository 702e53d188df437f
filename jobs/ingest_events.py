"""Ingest JSON events from Kafka into Delta, with a quarantine table for bad records.

Each batch is parsed once and written by the idempotent Delta sink to ``events`` (point
``ingest.1.events_written``), then to ``quarantine`` (raw bytes, reason, coordinates; point
``ingest.2.quarantine_written``). Guarantees: every record lands exactly once in exactly one
table across crashes and restarts; a batch id below a table's recorded one is
``BatchRegressionError``. Does not guarantee: row order; both tables showing a batch at once
(``quarantine`` lags a batch after a crash between the two, until the restart).
"""

from __future__ import annotations

from pyspark import StorageLevel
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming import StreamingQuery

from connectors import kafka
from connectors.delta.idempotent import DeltaIdempotentWriter
from jobs.startup import JobPaths, Under, job_parser, start_batches, start_job
from spark_ext.crash import declare
from spark_ext.quarantine import (
    EVENT_SCHEMA,
    JsonContract,
    parse_json,
    quarantine_rows,
    tag_json,
    valid_rows,
)

CONTRACT = JsonContract(EVENT_SCHEMA, required=("event_id", "event_time"))
#: The columns of the ``events`` table of the jobs appending with plain Delta writes.
EVENT_COLUMNS = ("event_id", "user_id", "amount", "event_time", "partition", "offset")
#: Sink ids (``txn.appId``) of the two tables.
EVENTS_SINK = "ingest.events"
QUARANTINE_SINK = "ingest.quarantine"
EVENTS_WRITTEN = declare("ingest.1.events_written", "driver", "events committed, quarantine not")
QUARANTINE_WRITTEN = declare(
    "ingest.2.quarantine_written", "driver", "both tables committed, Spark's commit log not"
)


def append_events(batch: DataFrame, events: str, quarantine: str) -> DataFrame:
    """Parse ``batch`` by :data:`CONTRACT`, append its valid rows to ``events`` and its bad ones
    to ``quarantine`` (plain Delta appends, no replay check); return the valid rows."""
    parsed = parse_json(batch, CONTRACT)
    valid = parsed.valid.select(*EVENT_COLUMNS)
    valid.write.format("delta").mode("append").save(str(events))
    parsed.quarantine.write.format("delta").mode("append").save(str(quarantine))
    return valid


class IngestPaths(JobPaths):
    events = Under("events")
    quarantine = Under("quarantine")
    checkpoint = Under("_checkpoints/ingest")


def start_ingest(
    spark: SparkSession,
    bootstrap: str,
    topic: str,
    paths: IngestPaths,
    max_offsets_per_trigger: int | None = None,
) -> StreamingQuery:
    """Start the one ingest query (``availableNow``): per batch, parse it once, write ``events``
    then ``quarantine``."""
    events = DeltaIdempotentWriter(str(paths.events), EVENTS_SINK)
    quarantine = DeltaIdempotentWriter(str(paths.quarantine), QUARANTINE_SINK)

    def write(batch: DataFrame, batch_id: int) -> None:
        tagged = tag_json(batch, CONTRACT)
        # What both writes need, computed once: fields of valid rows, raw bytes of bad ones.
        kept = tagged.select(
            *[c for c in tagged.columns if c not in ("value", "key")],
            F.when(F.col("_reason").isNotNull(), F.col("value")).alias("value"),
        ).persist(StorageLevel.MEMORY_AND_DISK)
        try:
            events(valid_rows(kept, CONTRACT), batch_id)
            EVENTS_WRITTEN.reached(batch_id)
            quarantine(quarantine_rows(kept), batch_id)
            QUARANTINE_WRITTEN.reached(batch_id)
        finally:
            kept.unpersist()

    source = kafka.read_stream(spark, bootstrap, topic, max_offsets_per_trigger)
    return start_batches(source, write, paths.checkpoint, "ingest_events")


def main(argv: list[str] | None = None) -> int:
    args = job_parser(__doc__.splitlines()[0], topic="events").parse_args(argv)
    job = start_job(args, "ingest")
    paths = IngestPaths(job.out)
    limit = args.max_offsets_per_trigger
    start_ingest(job.spark, job.bootstrap, args.topic, paths, limit).awaitTermination()
    job.print_tables("ingest", events=paths.events, quarantine=paths.quarantine)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
