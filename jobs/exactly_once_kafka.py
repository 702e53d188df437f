"""Kafka -> Kafka, exactly once: every input record forwarded once by an exactly-once Kafka sink.

Each output record keeps the input key; its value is the input value with its coordinates
(``--payload-only``: unchanged); ``record_id`` is ``topic/partition/offset``. A missing
``--topic`` is ``TopicMissingError``. Guarantees: every input record in ``--out`` exactly once
across SIGKILLs and restarts: for ``read_committed`` consumers with ``--mode two_phase``
(visible task by task), for every consumer with ``idempotent``. Does not guarantee: output
partition per input partition; with ``two_phase``, ``read_uncommitted`` consumers see aborted
records; exactly-once if ``--sink-id`` or ``--checkpoint`` change.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.streaming import StreamingQuery

from connectors import kafka
from jobs.startup import job_parser, location, start_job

if TYPE_CHECKING:
    from connectors.sinks import KafkaMode


def forward(stamped: DataFrame, payload_only: bool = False) -> DataFrame:
    """Stamped Kafka rows -> (key, value, record_id) output rows naming their source record
    (``record_id``: ``topic/partition/offset``, what the idempotent sink names it by)."""
    value = (
        F.col("value")
        if payload_only
        else F.to_json(F.struct("topic", "partition", "offset", "value"))
    )
    return stamped.select(
        "key",
        value.alias("value"),
        F.concat_ws("/", "topic", "partition", "offset").alias("record_id"),
    )


def start(
    source: DataFrame,
    bootstrap: str,
    out: str,
    checkpoint: str,
    sink_id: str,
    mode: KafkaMode = "two_phase",
    *,
    payload_only: bool = False,
    processing_time: str | None = None,
    delivery_timeout_ms: int = 120_000,
) -> StreamingQuery:
    """Forward ``source`` (a Kafka stream) to the topic ``out`` through the exactly-once Kafka
    sink on ``bootstrap`` (``availableNow`` unless ``processing_time``)."""
    from connectors.sinks import Trigger, exactly_once_to_kafka

    return exactly_once_to_kafka(
        forward(source, payload_only=payload_only),
        out,
        bootstrap=bootstrap,
        sink_id=sink_id,
        checkpoint=checkpoint,
        mode=mode,
        trigger=Trigger(processing_time=processing_time)
        if processing_time
        else Trigger(available_now=True),
        delivery_timeout_ms=delivery_timeout_ms,
    )


def main(argv: list[str] | None = None) -> int:
    parser = job_parser(__doc__.splitlines()[0], topic="events", out=False)
    add = parser.add_argument
    add("--out", required=True, help="output topic (created if missing)")
    add("--out-partitions", type=int, default=3)
    add("--checkpoint", type=location, required=True)
    add("--sink-id", required=True)
    add("--mode", choices=["two_phase", "idempotent"], default="two_phase")
    add("--processing-time", help="run continuously, not availableNow")
    add("--payload-only", action="store_true", help="forward the input value unchanged")
    add("--delivery-timeout-ms", type=int, default=120_000, help="two_phase: ack wait per record")
    args = parser.parse_args(argv)

    def check(bootstrap: str) -> None:  # the input topic: start_job's preflight
        kafka.create_topic(bootstrap, args.out, args.out_partitions)

    job = start_job(args, "eo_kafka", check=check)
    start(
        job.source(),
        job.bootstrap,
        args.out,
        args.checkpoint,
        args.sink_id,
        args.mode,
        payload_only=args.payload_only,
        processing_time=args.processing_time,
        delivery_timeout_ms=args.delivery_timeout_ms,
    ).awaitTermination()
    print(f"topic {args.out}: sink {args.sink_id} done")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
