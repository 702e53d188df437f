"""The exactly-once Kafka sinks in-process: every record once, batch ids recorded."""

from __future__ import annotations

import pytest

from connectors import kafka
from connectors.kafka.progress import SinkProgress
from connectors.sinks import Trigger, exactly_once_to_kafka
from jobs.exactly_once_kafka import forward
from tests.conftest import await_done
from tests.connectors.conftest import EVENTS, MAX_OFFSETS

pytestmark = pytest.mark.integration


def expected_records(spark, bootstrap, topic):
    """(key, value) of every output record a clean run writes, sorted."""
    rows = forward(kafka.read_batch(spark, bootstrap, topic)).collect()
    return sorted((r.key.encode() if r.key else None, r.value.encode()) for r in rows)


def output_records(bootstrap, topic, read_committed=True):
    got = kafka.consume_all(bootstrap, topic, read_committed=read_committed)
    return sorted((key, value) for _, _, key, value in got)


@pytest.mark.parametrize("mode", ["two_phase", "idempotent"])
def test_every_record_is_written_once_and_the_last_batch_recorded(
    spark, kafka_bootstrap, events_topic, new_topic, tmp_path, mode
):
    out = new_topic("eo-out", partitions=3)
    df = forward(
        kafka.read_stream(spark, kafka_bootstrap, events_topic, max_offsets_per_trigger=MAX_OFFSETS)
    )
    q = exactly_once_to_kafka(
        df,
        out,
        bootstrap=kafka_bootstrap,
        sink_id=f"out_{mode}",
        checkpoint=str(tmp_path / "chk"),
        mode=mode,
        trigger=Trigger(available_now=True),
    )
    await_done(q, 300)
    assert q.exception() is None

    want = expected_records(spark, kafka_bootstrap, events_topic)
    assert len(want) == EVENTS
    assert output_records(kafka_bootstrap, out) == want
    recorded = SinkProgress(kafka_bootstrap, out, f"out_{mode}").read()
    assert recorded is not None and recorded.batch_id == EVENTS // MAX_OFFSETS - 1
