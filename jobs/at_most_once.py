"""At-most-once delivery: Kafka -> Delta, the batch's offsets committed before its rows are written.

Per batch: write ``_offsets/<batch_id>.json`` by atomic rename, skipping a batch whose file
exists (point ``at_most_once.after_offset_commit``); append valid rows to ``events``,
malformed ones to ``quarantine`` (point ``at_most_once.after_write``); Spark's commit log.
Guarantees: no input record written twice. Does not guarantee: every record written: a crash
between the two steps loses the batch (``gap``).
"""

from __future__ import annotations

import json
import logging
import os
import sys
from dataclasses import dataclass
from pathlib import Path

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming import StreamingQuery

from connectors import kafka
from jobs.ingest_events import CONTRACT
from jobs.startup import JobPaths, Under, job_parser, print_tables, start_batches, start_job
from spark_ext.crash import declare
from spark_ext.quarantine import parse_json

log = logging.getLogger(__name__)

AFTER_OFFSET_COMMIT = declare(
    "at_most_once.after_offset_commit", "driver", "offsets recorded, nothing written"
)
AFTER_WRITE = declare("at_most_once.after_write", "driver", "events and quarantine written")

#: The columns of the ``events`` table.
EVENT_COLUMNS = ("event_id", "user_id", "amount", "event_time", "partition", "offset")


@dataclass(frozen=True)
class AtMostOncePaths(JobPaths):
    """The job's tables, its offset commits and Spark's checkpoint, under one folder."""

    events = Under("events")
    quarantine = Under("quarantine")
    offsets = Under("_offsets")


class OffsetCommitLog:
    """The job's own record of consumed offsets: one JSON file per batch, written atomically."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder

    def path(self, batch_id: int) -> Path:
        return self.folder / f"{batch_id}.json"

    def committed(self, batch_id: int) -> bool:
        return self.path(batch_id).exists()

    def commit(self, batch_id: int, ranges: dict[str, list[int]]) -> None:
        """Record ``ranges`` (partition -> [first, last] offset) for ``batch_id``."""
        self.folder.mkdir(parents=True, exist_ok=True)
        tmp = self.folder / f".{batch_id}.json.tmp"
        with open(tmp, "w") as f:
            json.dump(ranges, f, sort_keys=True)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.path(batch_id))


def offset_ranges(batch: DataFrame) -> dict[str, list[int]]:
    """Per partition, the first and last offset of the batch."""
    rows = batch.groupBy("partition").agg(F.min("offset"), F.max("offset")).collect()
    return {str(r[0]): [int(r[1]), int(r[2])] for r in sorted(rows)}


class AtMostOnceWriter:
    """The ``foreachBatch`` function: steps 1 and 2 of the module docstring."""

    def __init__(self, paths: AtMostOncePaths) -> None:
        self.paths = paths
        self.log = OffsetCommitLog(paths.offsets)

    def __call__(self, batch: DataFrame, batch_id: int) -> None:
        if self.log.committed(batch_id):
            log.warning("batch %d: offsets already committed, skipping it", batch_id)
            return
        batch = batch.persist()
        try:
            self.log.commit(batch_id, offset_ranges(batch))  # step 1
            AFTER_OFFSET_COMMIT.reached(batch_id)
            parsed = parse_json(batch, CONTRACT)  # step 2
            parsed.valid.select(*EVENT_COLUMNS).write.format("delta").mode("append").save(
                str(self.paths.events)
            )
            parsed.quarantine.write.format("delta").mode("append").save(str(self.paths.quarantine))
            AFTER_WRITE.reached(batch_id)
        finally:
            batch.unpersist()


def start(
    spark: SparkSession,
    bootstrap: str,
    topic: str,
    paths: AtMostOncePaths,
    max_offsets_per_trigger: int | None = None,
) -> StreamingQuery:
    """Start the query (``availableNow``: it stops when the topic is read to its end)."""
    source = kafka.read_stream(
        spark, bootstrap, topic, max_offsets_per_trigger=max_offsets_per_trigger
    )
    return start_batches(source, AtMostOnceWriter(paths), paths.checkpoint, "at_most_once")


def main(argv: list[str] | None = None) -> int:
    args = job_parser(__doc__.splitlines()[0], topic="events").parse_args(argv)
    job = start_job(args, "at_most_once")
    spark, paths = job.spark, AtMostOncePaths(job.out)
    query = start(spark, job.bootstrap, args.topic, paths, args.max_offsets_per_trigger)
    query.awaitTermination()
    print_tables(spark, "at_most_once", events=paths.events)
    return 0


if __name__ == "__main__":
    sys.exit(main())
