"""Fixtures of the sink tests: a small events topic and the output of a run that never crashed."""

from __future__ import annotations

import os

import pytest

from connectors.demo_events import produce_events

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
