"""At-most-once delivery: Kafka -> Delta, the batch's offsets committed before its rows are written.

Per batch: 1. write ``_offsets/<batch_id>.json`` by atomic rename, skipping a batch whose file
exists (point ``at_most_once.after_offset_commit``); 2. append valid rows to ``events``,
malformed ones to ``quarantine`` (point ``at_most_once.after_write``); Spark's commit log.
Guarantees: no input record written twice. Does not guarantee: every record written: a crash
between the two steps loses the batch (``gap``).
"""

from __future__ import annotations

import json
import logging

from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.streaming import StreamingQuery

from jobs.ingest_events import append_events
from jobs.startup import JobPaths, Under, job_parser, start_batches, start_job
from spark_ext import storage
from spark_ext.crash import declare

log = logging.getLogger(__name__)

AFTER_OFFSET_COMMIT = declare(
    "at_most_once.after_offset_commit", "driver", "offsets recorded, nothing written"
)
AFTER_WRITE = declare("at_most_once.after_write", "driver", "events and quarantine written")


class AtMostOncePaths(JobPaths):
    events = Under("events")
    quarantine = Under("quarantine")
    offsets = Under("_offsets")


def offsets_file(folder: str, batch_id: int) -> storage.Location:
    """Where batch ``batch_id``'s offsets are recorded under ``folder`` (a path or URI)."""
    return storage.Location.parse(folder).join(f"{batch_id}.json")


def commit_offsets(folder: str, batch_id: int, batch: DataFrame) -> None:
    """Record the batch's ``{partition: [first, last] offset}`` as ``<batch_id>.json``, whole
    or not at all (:func:`spark_ext.storage.write_bytes`)."""
    rows = batch.groupBy("partition").agg(F.min("offset"), F.max("offset")).collect()
    ranges = {str(r[0]): [int(r[1]), int(r[2])] for r in sorted(rows)}
    storage.write_bytes(offsets_file(folder, batch_id), json.dumps(ranges, sort_keys=True).encode())


def start(source: DataFrame, paths: AtMostOncePaths) -> StreamingQuery:
    """Start the query on ``source`` (a Kafka stream; ``availableNow``: it stops at its end):
    steps 1 and 2 of the module docstring per batch."""

    def write(batch: DataFrame, batch_id: int) -> None:
        if storage.exists(offsets_file(paths.offsets, batch_id)):
            log.warning("batch %d: offsets already committed, skipping it", batch_id)
            return
        batch = batch.persist()
        try:
            commit_offsets(paths.offsets, batch_id, batch)
            AFTER_OFFSET_COMMIT.reached(batch_id)
            append_events(batch, paths.events, paths.quarantine)
            AFTER_WRITE.reached(batch_id)
        finally:
            batch.unpersist()

    return start_batches(source, write, paths.checkpoint, "at_most_once")


def main(argv: list[str] | None = None) -> int:
    args = job_parser(__doc__.splitlines()[0], topic="events").parse_args(argv)
    job = start_job(args, "at_most_once")
    paths = AtMostOncePaths(job.out)
    start(job.source(), paths).awaitTermination()
    job.print_tables("at_most_once", events=paths.events)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
