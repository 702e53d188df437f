"""Kafka on both sides of Spark: a stamped reader (Spark's own connector), topics and plain
clients; the sinks live in the submodules."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Mapping
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from spark_ext import kafka_clients
from spark_ext.config import KAFKA_MIN_PARTITIONS_CONF
from spark_ext.kafka_clients import create_topic as create_topic  # re-exported
from spark_ext.kafka_clients import spark_options as spark_options  # re-exported

__all__ = [
    "consume_all",
    "consume_json_rows",
    "produce",
    "produce_json",
    "read_batch",
    "read_stream",
    "spark_options",
    "stamp",
]

log = logging.getLogger(__name__)


def produce(
    bootstrap: str, topic: str, records: Iterable[tuple[bytes | None, bytes, int | None]]
) -> int:
    """Produce ``(key, value, partition)`` records (``None``: by key), wait for every ack;
    returns the count."""
    producer = kafka_clients.producer(
        bootstrap, acks="all", linger_ms=20, batch_size=256 * 1024, enable_idempotence=True
    )
    count = 0
    try:
        for key, value, partition in records:
            producer.send(topic, key=key, value=value, partition=partition)
            count += 1
        producer.flush()
    finally:
        producer.close()
    return count


def produce_json(
    bootstrap: str,
    topic: str,
    rows: Iterable[Mapping[str, Any]],
    partitions: int | None = None,
) -> int:
    """Produce each mapping as a JSON value; with ``partitions``, round-robin by row index."""
    records = (
        (None, json.dumps(row, default=str).encode(), i % partitions if partitions else None)
        for i, row in enumerate(rows)
    )
    return produce(bootstrap, topic, records)


def _reader(reader: Any, bootstrap: str, topics: str | list[str], read_committed: bool) -> Any:
    """``reader`` (``spark.read`` or ``spark.readStream``) of Kafka topic(s) from the start,
    with the cluster's client properties (:func:`spark_ext.kafka_clients.spark_options`)."""
    return (
        reader.format("kafka")
        .options(**kafka_clients.spark_options(bootstrap))
        .option("subscribe", topics if isinstance(topics, str) else ",".join(topics))
        .option("kafka.isolation.level", "read_committed" if read_committed else "read_uncommitted")
    )


def read_stream(
    spark: SparkSession,
    bootstrap: str,
    topics: str | list[str],
    max_offsets_per_trigger: int | None = None,
    read_committed: bool = True,
    extra_options: Mapping[str, str] | None = None,
    kafka_properties: Mapping[str, str] | None = None,
) -> DataFrame:
    """A streaming DataFrame of the topic(s) with its source coordinates (:func:`stamp`);
    ``read_committed`` hides aborted transactional records. The session setting
    ``spark.spark_ext.kafka.minPartitions`` is the source's ``minPartitions``.
    ``kafka_properties`` (Kafka's names) are given to every client of ``bootstrap``
    (:func:`spark_ext.kafka_clients.configure`; default: those configured already)."""
    if kafka_properties is not None:
        kafka_clients.configure(bootstrap, kafka_properties)
    reader = _reader(spark.readStream, bootstrap, topics, read_committed)
    reader = reader.option("startingOffsets", "earliest").option("failOnDataLoss", "true")
    if max_offsets_per_trigger:
        reader = reader.option("maxOffsetsPerTrigger", str(max_offsets_per_trigger))
    if min_partitions := spark.conf.get(KAFKA_MIN_PARTITIONS_CONF, None):
        reader = reader.option("minPartitions", min_partitions)
    return stamp(reader.options(**(extra_options or {})).load())


def read_batch(
    spark: SparkSession, bootstrap: str, topics: str | list[str], read_committed: bool = True
) -> DataFrame:
    """The whole topic(s) as a batch DataFrame, same columns as :func:`read_stream`."""
    reader = _reader(spark.read, bootstrap, topics, read_committed)
    return stamp(
        reader.option("startingOffsets", "earliest").option("endingOffsets", "latest").load()
    )


def stamp(raw: DataFrame) -> DataFrame:
    """Spark's Kafka columns as ``key``, ``value`` (strings), ``topic``, ``partition``,
    ``offset``, ``kafka_timestamp``: the source coordinates (docs/design.md invariant 2)."""
    return raw.select(
        F.col("key").cast("string").alias("key"),
        F.col("value").cast("string").alias("value"),
        "topic",
        "partition",
        "offset",
        F.col("timestamp").alias("kafka_timestamp"),
    )


def consume_all(
    bootstrap: str, topic: str, read_committed: bool = True, timeout_s: float = 60.0
) -> list[tuple[int, int, bytes | None, bytes]]:
    """Every record of ``topic`` as ``(partition, offset, key, value)``, read with kafka-python
    (:func:`connectors.kafka.readback.read_records`)."""
    from connectors.kafka.readback import read_records

    records = read_records(bootstrap, topic, None, timeout_s, read_committed)
    return sorted((r.partition, r.offset, r.key, r.value) for r in records)


def consume_json_rows(bootstrap: str, topic: str) -> list[dict[str, Any]]:
    """Committed JSON records of ``topic`` as rows, with ``partition`` and ``offset`` added."""
    rows = []
    for partition, offset, _key, value in consume_all(bootstrap, topic):
        row = dict(json.loads(value))
        row.setdefault("partition", partition)
        row.setdefault("offset", offset)
        rows.append(row)
    return rows
