"""Rows/s of the plain Kafka -> Delta pipeline (the baseline later benchmarks compare against)."""

from __future__ import annotations

import time

from benchmarks.common import BenchContext, Figure
from connectors.demo_events import produce_events
from connectors.kafka import create_topic
from jobs.ingest_events import IngestPaths, start_ingest
from spark_ext import kafka_clients

EVENTS = 1_000_000


def events_topic(ctx: BenchContext, n: int) -> str:
    """A 3-partition topic holding exactly ``n`` demo events (1 in 1000 malformed), reused."""
    topic = f"bench-events-{n}"
    create_topic(ctx.bootstrap, topic, partitions=3)
    from kafka import TopicPartition

    consumer = kafka_clients.consumer(ctx.bootstrap)
    parts = [TopicPartition(topic, p) for p in range(3)]
    have = sum(consumer.end_offsets(parts).values())
    consumer.close()
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
    # Notes name no seconds: the summary of repeated runs keys figures by their note too.
    figures = []

    # Spark alone: Kafka source -> Delta sink, value kept as a string, no parsing.
    from connectors import kafka

    def raw_query():
        out = ctx.folder("ingest-raw")
        return (
            kafka.read_stream(spark, ctx.bootstrap, topic)
            .writeStream.format("delta")
            .option("checkpointLocation", str(out / "_checkpoint"))
            .trigger(availableNow=True)
            .start(str(out / "table"))
        )

    # Warm-up (not timed): the first query of a session pays for JIT and class loading.
    raw_query().awaitTermination()
    start = time.perf_counter()
    raw_query().awaitTermination()
    raw_s = time.perf_counter() - start
    figures.append(
        Figure(
            "ingest",
            "spark kafka->delta (raw value)",
            "rows/s",
            n / raw_s,
            "rows/s",
            baseline=True,
            note=f"{n:,} rows",
        )
    )

    # Spark alone, parsing: the same source parsed with from_json into one Delta table (no
    # quarantine): what parsing itself costs, next to the raw baseline.
    from jobs.exactly_once_delta import parse_events

    out = ctx.folder("ingest-spark-parsed")
    start = time.perf_counter()
    (
        parse_events(kafka.read_stream(spark, ctx.bootstrap, topic))
        .writeStream.format("delta")
        .option("checkpointLocation", str(out / "_checkpoint"))
        .trigger(availableNow=True)
        .start(str(out / "table"))
        .awaitTermination()
    )
    spark_parsed_s = time.perf_counter() - start
    figures.append(
        Figure(
            "ingest",
            "spark kafka->from_json->delta (no quarantine)",
            "rows/s",
            n / spark_parsed_s,
            "rows/s",
            note=f"{n:,} rows",
        )
    )

    # Ours: one query, one read; parsed once, valid rows and quarantine to two Delta tables.
    paths = IngestPaths(ctx.folder("ingest-parsed"))
    start = time.perf_counter()
    start_ingest(spark, ctx.bootstrap, topic, paths).awaitTermination()
    parsed_s = time.perf_counter() - start
    figures.append(
        Figure(
            "ingest",
            "ingest_events (parse+quarantine)",
            "rows/s",
            n / parsed_s,
            "rows/s",
            note=f"{n:,} rows",
        )
    )
    return figures
