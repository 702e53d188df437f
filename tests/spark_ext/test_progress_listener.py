"""The progress listener logs one line per batch and keeps the figures."""

from __future__ import annotations

import logging
import time

import pytest

from connectors.demo_events import produce_events
from jobs.ingest_events import IngestPaths, start_ingest
from spark_ext.metrics import ProgressListener
from tests.conftest import await_done

pytestmark = pytest.mark.integration


def test_listener_keeps_one_figure_per_batch(spark, kafka_bootstrap, new_topic, tmp_path, caplog):
    topic = new_topic("progress", partitions=3)
    produce_events(kafka_bootstrap, topic, 90)
    listener = ProgressListener.attach(spark)
    try:
        with caplog.at_level(logging.INFO, logger="spark_ext.metrics"):
            events_q = start_ingest(
                spark, kafka_bootstrap, topic, IngestPaths(tmp_path), max_offsets_per_trigger=30
            )
            await_done(events_q, 300)
            batches = [p["batchId"] for p in events_q.recentProgress if p["numInputRows"]]
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline and len(
                [f for f in listener.figures_for(events_q.id) if f.input_rows]
            ) < len(batches):
                time.sleep(0.2)
    finally:
        spark.streams.removeListener(listener)
    figures = [f for f in listener.figures_for(events_q.id) if f.input_rows]
    assert [f.batch_id for f in figures] == batches
    assert len(batches) == 3
    assert sum(f.input_rows for f in figures) == 90
    assert all(f.duration_ms > 0 for f in figures)
    assert any("ingest_events] batch" in r.message for r in caplog.records)
