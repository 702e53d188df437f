"""Sensor readings from Kafka (at least once, with redeliveries) -> DeltaDedupSink -> Delta.

Input: the readings of :mod:`jobs.ordering_dedup` (control records skipped). Guarantees: the
``unique`` table holds every distinct ``reading_id`` once (the first delivery by event time,
topic, partition, offset), across SIGKILLs at any step of the sink and restarts, whatever
``--max-offsets-per-trigger``; rows lacking id or event time go to ``quarantine``. No Spark
state store (docs/design.md, "Dedup"). Does not guarantee: dedup of copies further apart than
``--rotation-ms`` x 2 of event time; exactly-once if ``--out`` is split or reset.
"""

from __future__ import annotations

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming import StreamingQuery

from connectors import kafka
from connectors.delta.dedup_sink import DeltaDedupSink
from jobs.ordering_dedup import add_dedup_flags, dedup_summary, parse_readings
from jobs.startup import JobPaths, Under, job_parser, sink_id_for, start_batches, start_job
from spark_ext.dedup import DedupConfig
from spark_ext.storage import StorageSettings

#: Columns of the ``unique`` table.
OUTPUT_COLUMNS = ("reading_id", "sensor", "event_time", "temp_c", "topic", "partition", "offset")


def parse(raw: DataFrame) -> DataFrame:
    """Kafka rows -> readings with their coordinates (:func:`~jobs.ordering_dedup.parse_readings`
    renamed); control records dropped."""
    readings = parse_readings(raw).where(~F.col("is_end"))
    return readings.select(
        F.col("record_id").alias("reading_id"),
        F.col("key").alias("sensor"),
        "event_time",
        F.col("value").alias("temp_c"),
        "topic",
        "partition",
        "offset",
    )


class DedupPaths(JobPaths):
    unique = Under("unique")
    quarantine = Under("quarantine")
    catalog = Under("catalog")
    state = Under("_dedup_state")


def start(
    spark: SparkSession,
    bootstrap: str,
    topic: str,
    paths: DedupPaths,
    max_offsets_per_trigger: int | None = None,
    capacity: int = 10_000,
    fp_rate: float = 0.01,
    rotation_ms: int = 3_600_000,
    buckets: int = 4,
    storage: StorageSettings | None = None,
) -> tuple[StreamingQuery, DeltaDedupSink]:
    """Start the query (trigger availableNow) and return it with its sink (for metrics);
    ``storage``: the settings of locations on object storage (the profile's ``[storage]``)."""
    config = DedupConfig(
        catalog_path=str(paths.catalog),
        capacity=capacity,
        fp_rate=fp_rate,
        rotation_ms=rotation_ms,
        buckets=buckets,
        id_column="reading_id",
    )
    sink = DeltaDedupSink(
        config,
        paths.unique,
        sink_id=sink_id_for("dedup", topic),
        state_path=paths.state,
        quarantine_path=paths.quarantine,
        output_columns=OUTPUT_COLUMNS,
        storage=storage,
    )
    source = kafka.read_stream(spark, bootstrap, topic, max_offsets_per_trigger)
    return start_batches(parse(source), sink, paths.checkpoint, f"dedup_delta_{topic}"), sink


def main(argv: list[str] | None = None) -> int:
    parser = job_parser(__doc__.splitlines()[0], topic="readings")
    add_dedup_flags(parser)
    parser.add_argument(
        "--buckets", type=int, default=4, help="dedup buckets; keep it for the sink's life"
    )
    args = parser.parse_args(argv)
    job = start_job(args, "dedup")
    paths = DedupPaths(job.out)
    dedup = (args.capacity, args.fp_rate, args.rotation_ms, args.buckets)
    limit = args.max_offsets_per_trigger
    query, sink = start(
        job.spark, job.bootstrap, args.topic, paths, limit, *dedup, storage=job.profile.storage
    )
    query.awaitTermination()
    job.print_tables("dedup_delta", unique=paths.unique)
    print(dedup_summary(sink.metrics))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
