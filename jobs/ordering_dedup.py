"""Sensor readings from Kafka -> ordering buffer -> dedup -> EWMA (deg F) -> Delta, exactly once.

Input: JSON readings keyed by sensor, ``{"close": true}`` closing a partition, ``{"end": true,
"sensor": s}`` ending a sensor; duplicate deliveries possible. Guarantees (buffer and dedup on):
``ewma`` holds every distinct reading once, folded in event-time order (ties by topic,
partition, offset), across SIGKILLs and restarts and any batch plan; readings arriving after
their place was released go to ``late``. Does not guarantee: output from an idle, unclosed
partition; dedup beyond ``--rotation-ms`` x 2; anything with ``--no-buffer`` (arrival order,
the naive variant) or ``--no-dedup``.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Iterator
from dataclasses import dataclass, fields

import numpy as np
import pandas as pd
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming import StreamingQuery
from pyspark.sql.types import DoubleType, LongType, StructField

from connectors import kafka
from jobs.startup import JobPaths, Under, job_parser, sink_id_for, start_batches, start_job
from jobs.tracker_windows import iso
from spark_ext.dedup import DedupConfig, DedupMetrics, DedupSink
from spark_ext.operators.ewma import ewma
from spark_ext.ordering import FoldState, KeyedFold, OrderingConfig, order_and_fold, result_columns
from spark_ext.storage import session_settings

READING_SCHEMA = (
    "sensor STRING, reading_id STRING, event_time STRING, temp_c DOUBLE, `close` BOOLEAN, "
    "`end` BOOLEAN"
)


class EwmaFahrenheit(KeyedFold):
    """The demo fold: temperatures in Fahrenheit and their EWMA per key
    (:func:`spark_ext.operators.ewma.ewma`); a key's state is ``[ewma, seq]``. Late and
    duplicate readings get ``temp_c`` and ``temp_f`` but no ``ewma_f``/``seq`` (not folded)."""

    fields = (
        StructField("temp_c", DoubleType()),
        StructField("temp_f", DoubleType()),
        StructField("ewma_f", DoubleType()),
        StructField("seq", LongType()),
    )

    def __init__(self, alpha: float = 0.3) -> None:
        ewma([], alpha)  # validates alpha (ConfigError "ewma.alpha")
        self.alpha = alpha

    @staticmethod
    def fahrenheit(celsius: np.ndarray) -> np.ndarray:
        return np.asarray(celsius, dtype=float) * 9.0 / 5.0 + 32.0

    def describe(self, elements: pd.DataFrame) -> pd.DataFrame:
        celsius = elements["value"].to_numpy(dtype=float)
        return pd.DataFrame(
            {"temp_c": celsius, "temp_f": self.fahrenheit(celsius)}, index=elements.index
        )

    def fold(self, state: FoldState, elements: pd.DataFrame) -> pd.DataFrame:
        temps_f = self.fahrenheit(elements["value"].to_numpy(dtype=float))
        averages = np.empty(len(elements))
        seq = np.empty(len(elements), dtype=np.int64)
        keys = elements["key"].astype(str).to_numpy()
        for key, rows in pd.Series(range(len(keys))).groupby(keys, sort=False).groups.items():
            at = np.asarray(rows, dtype=np.int64)
            before = state.get(key)
            averages[at] = ewma(temps_f[at], self.alpha, None if before is None else before[0])
            start = 0 if before is None else int(before[1])
            seq[at] = np.arange(start + 1, start + len(at) + 1)
            state[key] = [float(averages[at[-1]]), int(seq[at[-1]])]
        out = self.describe(elements)
        out["ewma_f"], out["seq"] = averages, seq
        return out


#: The columns of the ``ewma`` table (the ordered output with :class:`EwmaFahrenheit`).
RESULT_COLUMNS = [c for c in result_columns(EwmaFahrenheit()) if c != "value"]


def sensor_readings(
    sensors: int = 4,
    per_sensor: int = 40,
    partitions: int = 2,
    duplicate_every: int = 0,
    duplicate_delay: int = 3,
    quiet: int = 0,
) -> Iterator[tuple[int, dict[str, object]]]:
    """Deterministic ``(partition, reading)`` in produce order.

    Reading ``i`` has event time ``EPOCH + i s`` and partition ``i % partitions``; every
    ``duplicate_every``-th is produced again ``duplicate_delay`` records later; each partition
    ends with a close record; the first ``quiet`` sensors skip their middle third.
    """
    per_partition: list[list[dict[str, object]]] = [[] for _ in range(partitions)]
    for i in range(per_sensor):
        for s in range(sensors):
            if s < quiet and per_sensor // 3 <= i < 2 * per_sensor // 3:
                continue
            reading = {
                "sensor": f"s{s}",
                "reading_id": f"s{s}-{i:05d}",
                "event_time": iso(i * 1000 + s),
                "temp_c": round(15 + 10 * ((i * 7 + s * 13) % 17) / 17, 3),
            }
            per_partition[i % partitions].append(reading)
    for p, rows in enumerate(per_partition):
        pending: list[tuple[int, dict[str, object]]] = []
        for j, row in enumerate(rows):
            yield p, row
            if duplicate_every and j % duplicate_every == duplicate_every - 1:
                pending.append((j + duplicate_delay, row))
            while pending and pending[0][0] <= j:
                yield p, pending.pop(0)[1]
        for _, row in pending:
            yield p, row
        yield p, {"close": True}


def produce_readings(bootstrap: str, topic: str, **kwargs: int) -> int:
    """Produce :func:`sensor_readings` (keyed by sensor); returns the record count."""
    readings = sensor_readings(**kwargs)
    records = ((str(r.get("sensor", "")).encode(), json.dumps(r).encode(), p) for p, r in readings)
    return kafka.produce(bootstrap, topic, records)


def add_dedup_flags(parser: argparse.ArgumentParser) -> None:
    """The dedup catalog's flags (:class:`~spark_ext.dedup.DedupConfig`), shared by the jobs."""
    parser.add_argument("--capacity", type=int, default=10_000, help="ids per filter rotation")
    parser.add_argument("--fp-rate", type=float, default=0.01)
    parser.add_argument("--rotation-ms", type=int, default=3_600_000)


def dedup_summary(m: DedupMetrics) -> str:
    """One line on what a run's dedup decided (printed at the end of a job)."""
    return (
        f"this run: {m.rows} rows decided, lookups avoided {100 * m.lookups_avoided:.1f}%, "
        f"duplicates {m.catalog_duplicates + m.batch_duplicates} "
        f"({m.batch_duplicates} in-batch, {m.catalog_duplicates} from the catalog), "
        f"observed FP {m.observed_fp_rate:.4f}"
    )


def parse_readings(raw: DataFrame) -> DataFrame:
    """Stamped Kafka rows -> the columns :func:`~spark_ext.ordering.order_and_fold` takes."""
    r = F.from_json("value", READING_SCHEMA)
    parsed = raw.select(r.alias("r"), "topic", "partition", "offset")
    return parsed.select(
        F.col("r.sensor").alias("key"),
        F.col("r.reading_id").alias("record_id"),
        F.to_timestamp("r.event_time").alias("event_time"),
        F.col("r.temp_c").alias("value"),
        "topic",
        "partition",
        "offset",
        (F.coalesce("r.close", F.lit(False)) | F.coalesce("r.end", F.lit(False))).alias("is_end"),
    )


class PipelinePaths(JobPaths):
    ewma = Under("ewma")
    late = Under("late")
    catalog = Under("catalog")


@dataclass(frozen=True)
class PipelineOptions:
    """How the pipeline runs (see ``--help``)."""

    partitions: int = 2
    shards: int = 2
    buffered: bool = True
    dedup: bool = True
    max_offsets_per_trigger: int | None = None
    capacity: int = 10_000
    fp_rate: float = 0.01
    rotation_ms: int = 3_600_000
    alpha: float = 0.3


def start_pipeline(
    spark: SparkSession, bootstrap: str, topic: str, paths: PipelinePaths, options: PipelineOptions
) -> tuple[StreamingQuery, DedupSink]:
    """Start the query (trigger availableNow) and return it with its sink (for metrics)."""
    ordering = OrderingConfig.for_topic(
        topic, options.partitions, shards=options.shards, buffered=options.buffered
    )
    dedup = (
        DedupConfig(
            catalog_path=str(paths.catalog),
            capacity=options.capacity,
            fp_rate=options.fp_rate,
            rotation_ms=options.rotation_ms,
            buckets=options.shards,
            storage=session_settings(spark),
        )
        if options.dedup
        else None
    )
    source = kafka.read_stream(spark, bootstrap, topic, options.max_offsets_per_trigger)
    tagged = order_and_fold(parse_readings(source), ordering, EwmaFahrenheit(options.alpha), dedup)
    sink = DedupSink(
        dedup,
        str(paths.ewma),
        sink_id=sink_id_for("ordering", topic),
        output_columns=RESULT_COLUMNS,
        quarantine_path=str(paths.late),
    )
    return start_batches(tagged, sink, paths.checkpoint, f"ordering_{topic}"), sink


def main(argv: list[str] | None = None) -> int:
    parser = job_parser(__doc__.splitlines()[0], topic="readings")
    parser.add_argument("--partitions", type=int, default=2, help="partitions of the topic")
    parser.add_argument("--shards", type=int, default=2)
    parser.add_argument("--no-buffer", action="store_true", help="naive: fold in arrival order")
    parser.add_argument("--no-dedup", action="store_true")
    add_dedup_flags(parser)
    parser.add_argument("--alpha", type=float, default=0.3, help="EWMA smoothing in (0, 1]")
    args = parser.parse_args(argv)
    job = start_job(args, "ordering")
    paths = PipelinePaths(job.out)
    flags = {f.name: getattr(args, f.name) for f in fields(PipelineOptions) if f.name in args}
    options = PipelineOptions(**flags, buffered=not args.no_buffer, dedup=not args.no_dedup)
    query, sink = start_pipeline(job.spark, job.bootstrap, args.topic, paths, options)
    query.awaitTermination()
    job.print_tables("ordering_dedup", ewma=paths.ewma)
    m = sink.metrics
    print(f"{dedup_summary(m)}, late {m.late_rows}, buffered {m.buffered_rows}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
