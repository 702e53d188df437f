"""A Kafka -> Kafka job for the sliced sink's tests whose slicing is chosen per run.

``jobs.exactly_once_kafka`` with what a restart may change (docs/design.md invariant 2 promises
the same rows for the same offsets, not the same partitioning): the master, the Kafka source's
``minPartitions`` (its offset ranges cut into more Spark partitions) and a ``coalesce`` before
the sink. ``--form foreach`` writes through :class:`KafkaTwoPhaseWriter` in ``foreachBatch``
instead of the data source. Run by ``tests/connectors/kafka/test_kafka_sliced_replay.py``.
"""

from __future__ import annotations

import argparse
import sys

if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--topic", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--checkpoint", required=True)
    parser.add_argument("--sink-id", required=True)
    parser.add_argument("--master", default="local[2,2]")
    parser.add_argument("--min-partitions", type=int, default=0)
    parser.add_argument("--coalesce", type=int, default=0)
    parser.add_argument("--max-offsets-per-trigger", type=int, default=120)
    parser.add_argument("--form", choices=["datasource", "foreach"], default="datasource")
    args = parser.parse_args()

    import logging

    from connectors import kafka
    from connectors.kafka.sliced_writer import KafkaTwoPhaseWriter
    from connectors.sinks import Trigger, exactly_once_to_kafka
    from jobs.exactly_once_kafka import forward
    from spark_ext.session import build_session

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    spark = build_session("faults", spark={"master": args.master})
    options = {"minPartitions": str(args.min_partitions)} if args.min_partitions else {}
    source = kafka.read_stream(
        spark,
        "127.0.0.1:9092",
        args.topic,
        max_offsets_per_trigger=args.max_offsets_per_trigger,
        extra_options=options,
    )
    rows = forward(source)
    if args.coalesce:
        rows = rows.coalesce(args.coalesce)
    if args.form == "datasource":
        query = exactly_once_to_kafka(
            rows,
            args.out,
            bootstrap="127.0.0.1:9092",
            sink_id=args.sink_id,
            checkpoint=args.checkpoint,
            trigger=Trigger(available_now=True),
        )
    else:
        writer = KafkaTwoPhaseWriter("127.0.0.1:9092", args.out, args.sink_id)
        query = (
            rows.writeStream.foreachBatch(writer)
            .option("checkpointLocation", args.checkpoint)
            .trigger(availableNow=True)
            .start()
        )
    query.awaitTermination()
    sys.exit(0)
