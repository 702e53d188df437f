"""Reading back the record ids (header ``spark_ext.record_id``) a Kafka sink already wrote for a
batch, from the end offsets recorded before it; a trimmed log is ``ReplayUnprovableError``."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

from connectors.kafka.records import RECORD_ID_HEADER
from connectors.kafka.settings import KafkaSinkSettings
from spark_ext import kafka_clients
from spark_ext.sinks.errors import ClientStalledError, ReplayUnprovableError

__all__ = [
    "assigned_consumer",
    "check_not_trimmed",
    "end_offsets",
    "read_records",
    "record_id",
    "written_ids",
]


def record_id(sink_id: str, batch_id: int, slice_name: str, seq: int | None = None) -> str:
    """``<sink>/<batch>/<name>`` (a row's record id), or ``.../<slice>/<seq>`` (no record id);
    ``<sink>/<batch>/`` is a prefix no other sink's or batch's ids share."""
    base = f"{sink_id}/{batch_id}/{slice_name}"
    return base if seq is None else f"{base}/{seq}"


def assigned_consumer(bootstrap: str, topic: str, **config: Any) -> tuple[Any, list[Any]]:
    """A kafka-python consumer without a group and every partition of ``topic``."""
    from kafka import TopicPartition

    consumer = kafka_clients.consumer(bootstrap, enable_auto_commit=False, **config)
    parts = [TopicPartition(topic, p) for p in sorted(consumer.partitions_for_topic(topic) or [])]
    return consumer, parts


def check_not_trimmed(
    sink_id: str, batch_id: int, since: dict[int, int], begin: dict[int, int]
) -> None:
    """:class:`ReplayUnprovableError` if a partition's log starts above ``since``."""
    trimmed = {p: (since.get(p, 0), b) for p, b in begin.items() if b > since.get(p, 0)}
    if trimmed:
        raise ReplayUnprovableError(sink_id, batch_id, trimmed)


def end_offsets(bootstrap: str, topic: str) -> dict[int, int]:
    """Each partition's last stable offset (``read_committed``): no record written after this
    call lies below it."""
    consumer, parts = assigned_consumer(bootstrap, topic, isolation_level="read_committed")
    try:
        return {tp.partition: off for tp, off in consumer.end_offsets(parts).items()}
    finally:
        consumer.close()


def read_records(
    bootstrap: str,
    topic: str,
    since: dict[int, int] | None = None,
    timeout_s: float = 60.0,
    read_committed: bool = False,
    sink_id: str = "",
    batch_id: int = -1,
) -> Iterator[Any]:
    """The records of ``topic`` from offsets ``since`` (per partition; ``None``: the log start)
    to the end offsets found at the call; ``read_committed``: committed records only. A log
    start above ``since`` is :class:`ReplayUnprovableError` (of ``sink_id``'s ``batch_id``); not
    at the end ``timeout_s`` later: :class:`ClientStalledError`."""
    consumer, parts = assigned_consumer(
        bootstrap,
        topic,
        auto_offset_reset="none",
        consumer_timeout_ms=int(timeout_s * 1000),
        isolation_level="read_committed" if read_committed else "read_uncommitted",
    )
    try:
        consumer.assign(parts)
        begin = {tp.partition: o for tp, o in consumer.beginning_offsets(parts).items()}
        if since is None:
            since = begin
        check_not_trimmed(sink_id, batch_id, since, begin)
        ends = consumer.end_offsets(parts)
        for tp in parts:
            consumer.seek(tp, since.get(tp.partition, 0))
        deadline = time.monotonic() + timeout_s
        while any(consumer.position(tp) < ends[tp] for tp in parts):
            if time.monotonic() > deadline:
                raise ClientStalledError(f"reading {topic} to its end", timeout_s)
            for records in consumer.poll(timeout_ms=1000).values():
                yield from records
    finally:
        consumer.close()


def written_ids(
    settings: KafkaSinkSettings,
    batch_id: int,
    since: dict[int, int] | None,
    read_committed: bool = False,
) -> set[bytes]:
    """The record ids (header ``spark_ext.record_id``) of the sink's ``batch_id`` in its topic
    from offsets ``since`` on (:func:`read_records`)."""
    s = settings
    prefix = record_id(s.sink_id, batch_id, "").encode()
    records = read_records(s.bootstrap, s.topic, since, 60.0, read_committed, s.sink_id, batch_id)
    return {
        value
        for r in records
        for name, value in r.headers or ()
        if name == RECORD_ID_HEADER and value.startswith(prefix)
    }
