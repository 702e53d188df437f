"""Fixtures of the sink tests: a small events topic and the output of a run that never crashed."""

from __future__ import annotations

import os

import pytest

from connectors import kafka
from connectors.demo_events import produce_events
from connectors.sinks import Trigger, exactly_once_to_kafka
from jobs.exactly_once_kafka import forward
from tests.conftest import await_done

#: Input of every sink test: small enough that a job run takes seconds, and with
#: ``MAX_OFFSETS`` per trigger it makes several micro-batches (3 partitions x 40 per batch).
EVENTS = 360
MAX_OFFSETS = 120
#: Random kills per sink in the heavy lane (``--heavy -k random``; the issues' count is 20). In CI
#: every step of each protocol is killed instead: random kills cost 1.5 min per sink at 2 kills.
RANDOM_KILLS = int(os.environ.get("SPARK_EXT_RANDOM_KILLS", "2"))


@pytest.fixture(scope="module")
def events_topic(kafka_bootstrap: str) -> str:
    """A 3-partition topic of :data:`EVENTS` demo events (1 in 30 malformed), one per module."""
    import os
    import uuid

    from connectors.kafka import create_topic

    name = f"sink-events-{os.getpid()}-{uuid.uuid4().hex[:6]}"
    create_topic(kafka_bootstrap, name, partitions=3)
    produce_events(kafka_bootstrap, name, EVENTS, malformed_every=30)
    return name


@pytest.fixture(scope="module")
def clean_records(
    spark, kafka_bootstrap: str, events_topic: str
) -> list[tuple[bytes | None, bytes]]:
    """(key, value) of every record a run of ``jobs.exactly_once_kafka`` that never crashed
    writes for :func:`events_topic`, sorted."""
    rows = forward(kafka.read_batch(spark, kafka_bootstrap, events_topic)).collect()
    return sorted((r.key.encode() if r.key else None, r.value.encode()) for r in rows)


def output_records(bootstrap: str, topic: str, read_committed: bool = True) -> list[tuple]:
    """(key, value) of every record in ``topic``, sorted."""
    got = kafka.consume_all(bootstrap, topic, read_committed=read_committed)
    return sorted((key, value) for _, _, key, value in got)


def forward_events(spark, bootstrap: str, events_topic: str, out: str, **sink) -> None:
    """Run ``jobs.exactly_once_kafka``'s query over all of ``events_topic`` (:data:`MAX_OFFSETS`
    a batch) into the topic ``out`` through ``exactly_once_to_kafka(**sink)``; fail unless it
    ends cleanly."""
    df = forward(
        kafka.read_stream(spark, bootstrap, events_topic, max_offsets_per_trigger=MAX_OFFSETS)
    )
    q = exactly_once_to_kafka(
        df, out, bootstrap=bootstrap, trigger=Trigger(available_now=True), **sink
    )
    await_done(q, 300)
    assert q.exception() is None
