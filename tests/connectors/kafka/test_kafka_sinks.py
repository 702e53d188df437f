"""The exactly-once Kafka sinks in-process: every record once, batch ids recorded."""

from __future__ import annotations

import pytest

from connectors.kafka.progress import SinkProgress
from tests.connectors.conftest import EVENTS, MAX_OFFSETS, forward_events, output_records

pytestmark = pytest.mark.integration


@pytest.mark.parametrize("mode", ["two_phase", "idempotent"])
def test_every_record_is_written_once_and_the_last_batch_recorded(
    spark, kafka_bootstrap, events_topic, new_topic, clean_records, tmp_path, mode
):
    out = new_topic("eo-out", partitions=3)
    forward_events(
        spark,
        kafka_bootstrap,
        events_topic,
        out,
        sink_id=f"out_{mode}",
        checkpoint=str(tmp_path / "chk"),
        mode=mode,
    )

    assert len(clean_records) == EVENTS
    assert output_records(kafka_bootstrap, out) == clean_records
    recorded = SinkProgress(kafka_bootstrap, out, f"out_{mode}").read()
    assert recorded is not None and recorded.batch_id == EVENTS // MAX_OFFSETS - 1
