"""Sinks whose ids differ only by a dotted suffix keep to their own names (issue #24, N7, N8).

Before, sink ``X``'s run-epoch group ``spark_ext.sink.X.run`` was sink ``X.run``'s progress
group: each batch ``X.run`` recorded moved ``X``'s run epoch (``X``'s tasks then refused to
write, fenced by a driver that never existed), and ``X``'s start erased ``X.run``'s record.
"""

from __future__ import annotations

import json
from collections import Counter

import pytest

from connectors import kafka
from connectors.demo_events import produce_events
from connectors.sinks import Trigger, exactly_once_to_kafka
from jobs.exactly_once_kafka import forward
from tests.conftest import await_done
from tests.connectors.conftest import EVENTS

pytestmark = pytest.mark.integration


def sources(bootstrap: str, topic: str) -> Counter:
    """How many times each input record (topic, partition, offset) is in ``topic``."""
    got = kafka.consume_all(bootstrap, topic, read_committed=True)
    return Counter(
        (src["topic"], src["partition"], src["offset"])
        for src in (json.loads(value) for _, _, _, value in got)
    )


def test_sinks_x_and_x_run_side_by_side_each_write_every_record_once(
    spark, kafka_bootstrap, events_topic, new_topic, tmp_path
):
    other = new_topic("names-in", partitions=3)
    produce_events(kafka_bootstrap, other, EVENTS)
    out = new_topic("names-out", partitions=3)
    queries = []
    for sink_id, source in (("X.run", other), ("X", events_topic)):
        df = forward(kafka.read_stream(spark, kafka_bootstrap, source, max_offsets_per_trigger=30))
        queries.append(
            exactly_once_to_kafka(
                df,
                out,
                bootstrap=kafka_bootstrap,
                sink_id=sink_id,
                checkpoint=str(tmp_path / sink_id / "chk"),
                trigger=Trigger(available_now=True),
            )
        )
    for q in queries:
        await_done(q, 400)
    errors = [str(q.exception()).splitlines()[0] for q in queries if q.exception()]

    assert errors == []
    got = sources(kafka_bootstrap, out)
    assert set(got.values()) == {1}
    assert Counter(topic for topic, _, _ in got) == {events_topic: EVENTS, other: EVENTS}
