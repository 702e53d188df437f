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

import argparse
import logging
import sys
from pathlib import Path

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from connectors import kafka

log = logging.getLogger(__name__)


def forward(stamped: DataFrame, payload_only: bool = False) -> DataFrame:
    """Stamped Kafka rows -> (key, value, record_id) output rows naming their source record.

    ``record_id`` is ``topic/partition/offset`` of the input record (what the idempotent sink
    names the record by); ``payload_only`` forwards the input value unchanged.
    """
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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--profile", default="local")
    parser.add_argument("--bootstrap", default=None, help="overrides the profile's brokers")
    parser.add_argument("--topic", default="events")
    parser.add_argument("--out", required=True, help="output topic (created if missing)")
    parser.add_argument("--out-partitions", type=int, default=3)
    parser.add_argument("--checkpoint", type=Path, required=True)
    parser.add_argument("--sink-id", required=True)
    parser.add_argument("--mode", choices=["two_phase", "idempotent"], default="two_phase")
    parser.add_argument("--max-offsets-per-trigger", type=int, default=None)
    parser.add_argument(
        "--processing-time", default=None, help="run continuously, not availableNow"
    )
    parser.add_argument(
        "--payload-only", action="store_true", help="forward the input value unchanged"
    )
    parser.add_argument(
        "--delivery-timeout-ms",
        type=int,
        default=120_000,
        help="two_phase: how long a record may wait for its acknowledgement",
    )
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")

    from connectors.kafka.records import require_topic
    from connectors.sinks import Trigger, exactly_once_to_kafka
    from spark_ext.config import load_profile
    from spark_ext.metrics import ProgressListener
    from spark_ext.session import build_session

    profile = load_profile(args.profile)
    bootstrap = args.bootstrap or profile.kafka.bootstrap_servers
    require_topic(bootstrap, args.topic, role="input")
    kafka.create_topic(bootstrap, args.out, args.out_partitions)
    spark = build_session(profile)
    ProgressListener.attach(spark)
    source = kafka.read_stream(
        spark, bootstrap, args.topic, max_offsets_per_trigger=args.max_offsets_per_trigger
    )
    trigger = (
        Trigger(processing_time=args.processing_time)
        if args.processing_time
        else Trigger(available_now=True)
    )
    query = exactly_once_to_kafka(
        forward(source, payload_only=args.payload_only),
        args.out,
        bootstrap=bootstrap,
        sink_id=args.sink_id,
        checkpoint=args.checkpoint,
        mode=args.mode,
        trigger=trigger,
        delivery_timeout_ms=args.delivery_timeout_ms,
    )
    query.awaitTermination()
    print(f"topic {args.out}: sink {args.sink_id} done")
    return 0


if __name__ == "__main__":
    sys.exit(main())
