"""Two queries through a Kafka topic: the second closes its windows by the first one's tracker.

``up`` aggregates :func:`jobs.tracker_windows.demo_records` per (10 s window, user) and forwards
rows to ``--mid-topic`` (two-phase Kafka writer), labelled *sent* into namespace ``down``;
``down`` sums them per window into ``totals`` with no watermark. One shared
:class:`~spark_ext.tracker.kafka_agent.KafkaTrackingAgent` (docs/design.md, "Tracked
queries"). Guarantees: every downstream window emitted once with all its upstream rows while
the upstream keeps its close promises, across restarts of either query; unforwarded or
duplicated rows go to ``late_down``. Does not guarantee: release before the upstream window ended.
"""

from __future__ import annotations

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming import StreamingQuery

from jobs.startup import job_parser, start_job, under
from jobs.tracker_windows import run_until

UP, DOWN = "up", "down"
WINDOW = "10 seconds"
#: What the upstream writes per row (its WindowAggregate output plus the forwarded label).
FORWARDED_SCHEMA = (
    "window_start_ms BIGINT, window_end_ms BIGINT, key STRING, `count` BIGINT, sum_amount DOUBLE, "
    "fwd_substream STRING, fwd_label BIGINT"
)


def parse_forwarded(raw: DataFrame) -> DataFrame:
    """Kafka rows of the middle topic -> the upstream's result columns + coordinates."""
    return raw.select(
        F.from_json("value", FORWARDED_SCHEMA).alias("r"), "topic", "partition", "offset"
    ).select("r.*", F.lit("all").alias("scope"), "topic", "partition", "offset")


def start_two_queries(
    spark: SparkSession,
    bootstrap: str,
    topic: str,
    partitions: int,
    mid_topic: str,
    out: str,
    agent_name: str,
    max_offsets_per_trigger: int | None = 100,
) -> tuple[StreamingQuery, StreamingQuery, object]:
    """Start ``up`` and ``down``; returns both queries and their shared agent."""
    from connectors import kafka
    from connectors.delta.idempotent import DeltaIdempotentWriter
    from connectors.kafka.sliced_writer import KafkaTwoPhaseWriter
    from jobs.tracker_windows import topic_partitions, tracked_events
    from spark_ext.operators import Count, Sum, WindowAggregate
    from spark_ext.sinks.trigger import Trigger
    from spark_ext.streaming import Closing, TrackedStream, forward_records
    from spark_ext.tracker import Tumbling
    from spark_ext.tracker.kafka_agent import KafkaTrackingAgent

    kafka.create_topic(bootstrap, mid_topic, partitions)
    agent = KafkaTrackingAgent(bootstrap, agent_name)
    trigger = Trigger(processing_time="0 seconds")
    sink_id = agent_name.replace("-", "_")  # sink ids: letters, digits, '_' and '.'
    to_kafka = KafkaTwoPhaseWriter(bootstrap, mid_topic, f"{sink_id}.{UP}")

    def forward(df: DataFrame, batch_id: int) -> None:
        to_kafka(forward_records(df, record_ids=True), batch_id)

    up = (
        tracked_events(spark, bootstrap, topic, partitions, agent, max_offsets_per_trigger)
        .apply(
            Tumbling(WINDOW, namespace=UP),
            WindowAggregate(Count(), Sum("amount")),
            name=f"{agent_name}_{UP}",
        )
        .forward_to(DOWN)
        .start(
            forward,
            checkpoint=under(out, "_checkpoint_up"),
            late=DeltaIdempotentWriter(under(out, "late_up"), f"{sink_id}.{UP}.late"),
            trigger=trigger,
            topic_partitions=topic_partitions(bootstrap, topic),
        )
    )
    forwarded = parse_forwarded(kafka.read_stream(spark, bootstrap, mid_topic))
    down = (
        TrackedStream(
            forwarded,
            key="scope",
            event_time="window_start_ms",
            agent=agent,
            closing=Closing.upstream(),
            upstream=True,
        )
        .apply(
            Tumbling(WINDOW, namespace=DOWN),
            WindowAggregate(
                Count(name="users"), Sum("count", name="events"), Sum("sum_amount", name="amount")
            ),
            name=f"{agent_name}_{DOWN}",
        )
        .start(
            DeltaIdempotentWriter(under(out, "totals"), f"{sink_id}.{DOWN}"),
            checkpoint=under(out, "_checkpoint_down"),
            late=DeltaIdempotentWriter(under(out, "late_down"), f"{sink_id}.{DOWN}.late"),
            trigger=trigger,
        )
    )
    return up, down, agent


def run_until_complete(up: StreamingQuery, down: StreamingQuery, agent: object) -> None:
    """Process until every upstream window ended, was forwarded, and ended downstream; stop."""

    def done() -> bool:
        state = agent.state()  # type: ignore[attr-defined]
        n_up, n_down = (int(state.ended_counts.get(n, 0)) for n in (UP, DOWN))
        return bool(n_up and n_up == n_down and not state.open_substreams())

    run_until([up, down], done, 0.2)


def main(argv: list[str] | None = None) -> int:
    parser = job_parser(__doc__.splitlines()[0], topic="tracked-events", max_offsets=100)
    parser.add_argument("--partitions", type=int, default=3)
    parser.add_argument("--mid-topic", default=None, help="default: <topic>-windows")
    parser.add_argument("--agent", default=None, help="agent name; default: <topic>")
    args = parser.parse_args(argv)
    job = start_job(args, "tracker_two_queries")
    mid, agent_name = args.mid_topic or f"{args.topic}-windows", args.agent or args.topic
    up, down, agent = start_two_queries(
        job.spark,
        job.bootstrap,
        args.topic,
        args.partitions,
        mid,
        job.out,
        agent_name,
        args.max_offsets_per_trigger,
    )
    run_until_complete(up, down, agent)
    job.print_tables("tracker_two_queries", totals=under(job.out, "totals"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
