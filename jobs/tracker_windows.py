"""Tumbling-window aggregates per user, released by the tracker instead of a watermark.

Input: :func:`demo_records`; each partition promises disorder of at most ``--disorder-ms``.
Output: ``windows`` (count, sum, mean per 10 s window and user) and ``late`` (rows that broke
the promise or lack key or time, with the reason). Guarantees: every input row in exactly one
of them under a driver kill at any step and a restart; each window emitted once, when every
partition's frontier passed its end (docs/design.md, "Tracked queries"). Does not guarantee:
release while a partition is idle without a close marker; a restart after the ``txn`` expired
(``DeltaTxnExpiredError``, nothing written). The tracker's agent: a local folder under ``--out``,
or on object storage a Kafka agent named for ``--out`` (docs/design.md, "Object storage", jobs).
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable, Iterator, Sequence
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming import StreamingQuery

from jobs.startup import job_parser, start_job, under
from spark_ext import kafka_clients, storage

if TYPE_CHECKING:
    from spark_ext.streaming import TrackedStream

EPOCH = datetime(2026, 1, 1, tzinfo=UTC)
WINDOW = "10 seconds"
EVENT_SCHEMA = "user_id STRING, amount DOUBLE, event_time TIMESTAMP, close_through TIMESTAMP"
TIMEOUT_S = 600  # how long the tracker jobs run before they give up (run_until)


def iso(ms: int) -> str:
    """``EPOCH`` plus ``ms`` milliseconds, ISO 8601 in UTC (``...Z``): a demo event time."""
    return (EPOCH + timedelta(milliseconds=ms)).isoformat().replace("+00:00", "Z")


def event(user: str, amount: float, t_ms: int) -> bytes:
    return json.dumps({"user_id": user, "amount": amount, "event_time": iso(t_ms)}).encode()


def marker(through_ms: int) -> bytes:
    """A close marker: this partition sends nothing with an event time below ``through_ms``."""
    return json.dumps({"close_through": iso(through_ms)}).encode()


def demo_time(i: int, step_ms: int = 700, jitter_ms: int = 0) -> int:
    """Event time of demo event ``i``: ``i * step_ms``, minus a fixed pseudo-random jitter."""
    return i * step_ms - ((i * 7919) % (jitter_ms + 1) if jitter_ms else 0)


def demo_records(
    n: int, partitions: int, step_ms: int = 700, jitter_ms: int = 0
) -> Iterator[tuple[bytes | None, bytes, int]]:
    """``n`` events of 7 users over ``partitions``, then a final marker each.

    ``jitter_ms``: each event up to that much earlier than ``i * step_ms`` (out of order). Whole
    amounts keep sums exact in any order.
    """
    for i in range(n):
        user = f"u{i % 7}"
        t = demo_time(i, step_ms, jitter_ms)
        yield user.encode(), event(user, float(i % 13), t), i % partitions
    for p in range(partitions):
        yield None, marker(n * step_ms + 60_000), p


def topic_partitions(bootstrap: str, topic: str) -> dict[str, int]:
    """``{topic: partition count}`` from the topic's metadata (checked against --partitions)."""
    consumer = kafka_clients.consumer(bootstrap)
    try:
        return {topic: len(consumer.partitions_for_topic(topic) or ())}
    finally:
        consumer.close()


def parse(raw: DataFrame) -> DataFrame:
    """Kafka rows -> event columns + coordinates (markers have ``close_through`` set)."""
    return raw.select(
        F.from_json("value", EVENT_SCHEMA).alias("e"), "topic", "partition", "offset"
    ).select("e.*", "topic", "partition", "offset")


def tracked_events(
    spark: SparkSession,
    bootstrap: str,
    topic: str,
    partitions: int,
    agent: object,
    max_offsets_per_trigger: int | None,
    disorder_ms: int = 0,
) -> TrackedStream:
    """The topic's events keyed by user, tracked by ``agent``: each partition closes by its
    markers and its event time, allowed ``disorder_ms`` of disorder."""
    from connectors import kafka
    from spark_ext.streaming import Closing, TrackedStream

    return TrackedStream(
        parse(kafka.read_stream(spark, bootstrap, topic, max_offsets_per_trigger)),
        key="user_id",
        event_time="event_time",
        agent=agent,  # type: ignore[arg-type]
        closing=Closing.partitions(topic, partitions, disorder=disorder_ms),
        close_marker="close_through",
    )


def start_windows(
    spark: SparkSession,
    bootstrap: str,
    topic: str,
    partitions: int,
    out: str,
    max_offsets_per_trigger: int | None = 100,
    disorder_ms: int = 0,
    path: str = "distributed",
) -> tuple[StreamingQuery, object]:
    """Start the tracked window query; returns it and its agent (the module docstring's).
    ``disorder_ms``: the allowed disorder inside each partition (0: ordered); rows beyond it go
    to the Delta table ``late``; ``path``: the tracked query's (``driver`` or ``distributed``)."""
    from connectors.delta.idempotent import DeltaIdempotentWriter
    from spark_ext.operators import Count, Mean, Sum, WindowAggregate
    from spark_ext.sinks.trigger import Trigger
    from spark_ext.tracker import LocalTrackingAgent, Tumbling
    from spark_ext.tracker.kafka_agent import KafkaTrackingAgent

    if storage.Location.parse(out).is_s3:
        agent: object = KafkaTrackingAgent(
            bootstrap, f"tw-{hashlib.sha256(out.encode()).hexdigest()[:16]}"
        )
    else:
        agent = LocalTrackingAgent(under(out, "tracker"))
    query = (
        tracked_events(
            spark, bootstrap, topic, partitions, agent, max_offsets_per_trigger, disorder_ms
        )
        .apply(
            Tumbling(WINDOW, namespace="windows"),
            WindowAggregate(Count(), Sum("amount"), Mean("amount")),
            name="tracker_windows",
        )
        .start(
            DeltaIdempotentWriter(under(out, "windows"), "tracker_windows"),
            checkpoint=under(out, "_checkpoint"),
            late=DeltaIdempotentWriter(under(out, "late"), "tracker_windows.late"),
            trigger=Trigger(processing_time="0 seconds"),
            topic_partitions=topic_partitions(bootstrap, topic),
            path=path,
        )
    )
    return query, agent


def run_until(queries: Sequence[StreamingQuery], done: Callable[[], bool], pause_s: float) -> None:
    """Process ``queries`` until ``done()``, then the last one once more (the flush batch of
    the last end events), then stop them; ``TimeoutError`` after :data:`TIMEOUT_S`."""
    deadline = time.monotonic() + TIMEOUT_S
    try:
        while time.monotonic() < deadline:
            for query in queries:
                query.processAllAvailable()
            if done():
                queries[-1].processAllAvailable()
                return
            time.sleep(pause_s)
        raise TimeoutError(f"substreams still open after {TIMEOUT_S}s")
    finally:
        for query in queries:
            query.stop()


def run_until_complete(query: StreamingQuery, agent: object) -> None:
    """Process until the source is drained and the tracker has no open substream; stop."""
    state = agent.state  # type: ignore[attr-defined]
    run_until([query], lambda: not state().open_substreams(), 0.5)


def main(argv: list[str] | None = None) -> int:
    parser = job_parser(__doc__.splitlines()[0], topic="tracked-events", max_offsets=100)
    parser.add_argument("--master", default=None, help="e.g. local[2,4] to allow task retries")
    parser.add_argument("--partitions", type=int, default=3)
    parser.add_argument("--disorder-ms", type=int, default=0, help="allowed disorder per partition")
    parser.add_argument(
        "--path", choices=("driver", "distributed"), default="distributed", help="tracked path"
    )
    args = parser.parse_args(argv)
    job = start_job(args, "tracker_windows", spark={"master": args.master} if args.master else {})
    limits = (args.max_offsets_per_trigger, args.disorder_ms, args.path)
    query, agent = start_windows(
        job.spark, job.bootstrap, args.topic, args.partitions, job.out, *limits
    )
    run_until_complete(query, agent)
    job.print_tables("tracker_windows", windows=under(job.out, "windows"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
