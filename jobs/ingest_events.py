"""Ingest JSON events from Kafka into Delta, with a quarantine table for malformed rows.

Run::

    python -m jobs.ingest_events --profile local --topic events --out var/data/ingest

Guarantees: every record of the topic lands in exactly one of the two Delta tables
(``events`` or ``quarantine``); each table is written by Spark's own Delta streaming sink,
which is idempotent per (query id, batch id), so a restart from the checkpoint neither loses
nor duplicates rows. Records are read ``read_committed``.
Does not guarantee: any order of rows inside a table; the two tables are two queries, so
after a crash one may be a batch ahead of the other until the restart catches up.
"""

from __future__ import annotations

import argparse
import logging
import sys
from dataclasses import dataclass
from pathlib import Path

from pyspark.sql import SparkSession
from pyspark.sql.streaming import StreamingQuery

from connectors import kafka
from spark_ext.quarantine import EVENT_SCHEMA, JsonContract, parse_json

log = logging.getLogger(__name__)

CONTRACT = JsonContract(EVENT_SCHEMA, required=("event_id", "event_time"))


@dataclass(frozen=True)
class IngestPaths:
    """The two tables and their checkpoints under one folder."""

    root: Path

    @property
    def events(self) -> Path:
        return self.root / "events"

    @property
    def quarantine(self) -> Path:
        return self.root / "quarantine"

    def checkpoint(self, name: str) -> Path:
        return self.root / "_checkpoints" / name


def start_ingest(
    spark: SparkSession,
    bootstrap: str,
    topic: str,
    paths: IngestPaths,
    available_now: bool = True,
    max_offsets_per_trigger: int | None = None,
) -> list[StreamingQuery]:
    """Start the two queries (valid events, quarantine) and return them."""
    source = kafka.read_stream(
        spark, bootstrap, topic, max_offsets_per_trigger=max_offsets_per_trigger
    )
    parsed = parse_json(source, CONTRACT)
    queries = []
    for name, df, path in (
        ("events", parsed.valid, paths.events),
        ("quarantine", parsed.quarantine, paths.quarantine),
    ):
        writer = (
            df.writeStream.format("delta")
            .queryName(f"ingest_{name}")
            .option("checkpointLocation", str(paths.checkpoint(name)))
            .outputMode("append")
        )
        writer = (
            writer.trigger(availableNow=True)
            if available_now
            else writer.trigger(processingTime="1 second")
        )
        queries.append(writer.start(str(path)))
    return queries


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--profile", default="local")
    parser.add_argument("--topic", default="events")
    parser.add_argument("--out", type=Path, default=None, help="folder of the tables")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")

    from spark_ext.config import load_profile
    from spark_ext.metrics import ProgressListener
    from spark_ext.session import build_session

    profile = load_profile(args.profile)
    spark = build_session(profile)
    ProgressListener.attach(spark)
    paths = IngestPaths(args.out or profile.paths.resolved_data_root() / "ingest")
    for q in start_ingest(spark, profile.kafka.bootstrap_servers, args.topic, paths):
        q.awaitTermination()
    events = spark.read.format("delta").load(str(paths.events)).count()
    quarantined = spark.read.format("delta").load(str(paths.quarantine)).count()
    print(f"events table     {paths.events}: {events} rows")
    print(f"quarantine table {paths.quarantine}: {quarantined} rows")
    return 0


if __name__ == "__main__":
    sys.exit(main())
