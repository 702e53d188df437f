"""Rows/s of the plain Kafka -> Delta pipeline (the baseline later benchmarks compare against)."""

from __future__ import annotations

import time
from functools import partial

from benchmarks.common import BenchContext, Figure, start_query, timed
from connectors import kafka
from connectors.demo_events import produce_events
from connectors.kafka.readback import end_offsets
from jobs.exactly_once_delta import parse_events
from jobs.ingest_events import IngestPaths, start_ingest

EVENTS = 1_000_000


def events_topic(ctx: BenchContext, n: int) -> str:
    """A 3-partition topic holding exactly ``n`` demo events (1 in 1000 malformed), reused."""
    topic = f"bench-events-{n}"
    kafka.create_topic(ctx.bootstrap, topic, partitions=3)
    have = sum(end_offsets(ctx.bootstrap, topic).values())
    if have != n:
        if have:
            raise RuntimeError(f"{topic} holds {have} records, not {n}: delete it and rerun")
        start = time.perf_counter()
        produce_events(ctx.bootstrap, topic, n, malformed_every=1000)
        print(f"  produced {n:,} events in {time.perf_counter() - start:.1f}s", flush=True)
    return topic


def run(ctx: BenchContext) -> list[Figure]:
    n = ctx.n(EVENTS)
    topic = events_topic(ctx, n)
    spark = ctx.spark

    def raw() -> object:  # Spark alone: the value kept as a string, no parsing
        return start_query(kafka.read_stream(spark, ctx.bootstrap, topic), ctx.folder("ingest-raw"))

    def spark_parsed() -> object:  # Spark alone, from_json into one table, no quarantine
        return start_query(parse_events(kafka.read_stream(spark, ctx.bootstrap, topic)), parsed)

    def ours() -> object:  # one read, parsed once, valid rows and quarantine to two tables
        return start_ingest(spark, ctx.bootstrap, topic, paths)

    timed(raw)  # warm-up (not timed): the first query of a session pays JIT and class loading
    parsed, paths = ctx.folder("ingest-spark-parsed"), IngestPaths(ctx.folder("ingest-parsed"))
    # Notes name no seconds: the summary of repeated runs keys figures by their note too.
    figure = partial(Figure, "ingest", metric="rows/s", unit="rows/s", note=f"{n:,} rows")
    return [
        figure("spark kafka->delta (raw value)", value=n / timed(raw), baseline=True),
        figure("spark kafka->from_json->delta (no quarantine)", value=n / timed(spark_parsed)),
        figure("ingest_events (parse+quarantine)", value=n / timed(ours)),
    ]
