"""Negative control: Kafka -> Kafka with Spark's own Kafka writer, which is at-least-once.

The rows of :mod:`jobs.exactly_once_kafka`, written per batch by ``df.write.format("kafka")``
with nothing recording which batch the topic holds; point ``spark_kafka.1.written`` sits in
Spark's sink's window (batch in the topic, not in the commit log). Guarantees: no record lost.
Does not guarantee: no duplicates (the crash tests assert they appear).
"""

from __future__ import annotations

from pyspark.sql import DataFrame

from connectors import kafka
from jobs.exactly_once_kafka import forward
from jobs.startup import job_parser, location, start_batches, start_job
from spark_ext.crash import declare

WRITTEN = declare("spark_kafka.1.written", "driver", "in the topic, not in the commit log")


def main(argv: list[str] | None = None) -> int:
    parser = job_parser(__doc__.splitlines()[0], topic="events", out=False)
    parser.add_argument("--out", required=True, help="the output topic")
    parser.add_argument("--checkpoint", type=location, required=True)
    args = parser.parse_args(argv)
    job = start_job(
        args, "spark_kafka", check=lambda bootstrap: kafka.create_topic(bootstrap, args.out, 3)
    )

    def write(df: DataFrame, batch_id: int) -> None:
        df.write.format("kafka").options(**kafka.spark_options(job.bootstrap)).option(
            "topic", args.out
        ).save()
        WRITTEN.reached(batch_id)

    forwarded = forward(job.source()).drop("record_id")
    start_batches(forwarded, write, args.checkpoint).awaitTermination()
    print(f"topic {args.out}: done")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
