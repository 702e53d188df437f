"""The ingest job killed between its two Delta commits: each table still holds each record once."""

from __future__ import annotations

import pytest

from connectors.demo_events import produce_events
from jobs.ingest_events import EVENTS_WRITTEN, IngestPaths
from spark_ext.jobrun import run_job

pytestmark = [pytest.mark.integration, pytest.mark.crash]

N, BAD_EVERY = 300, 10


def test_ingest_killed_between_events_and_quarantine_writes_both_tables_once(
    spark, kafka_bootstrap, new_topic, tmp_path
):
    topic = new_topic("ingest-crash", partitions=3)
    produce_events(kafka_bootstrap, topic, N, malformed_every=BAD_EVERY)
    args = ["--profile", "test", "--topic", topic, "--out", str(tmp_path)]
    killed = run_job("jobs.ingest_events", args, fault=f"{EVENTS_WRITTEN.name}@0:kill")
    assert killed.killed and killed.fired(EVENTS_WRITTEN.name, "kill"), killed.output_tail
    paths = IngestPaths(tmp_path)
    assert spark.read.format("delta").load(str(paths.events)).count() == N - N // BAD_EVERY

    final = run_job("jobs.ingest_events", args)  # replays batch 0: events skip it
    assert final.ok, final.output_tail
    events = spark.read.format("delta").load(str(paths.events))
    quarantine = spark.read.format("delta").load(str(paths.quarantine))
    assert events.count() == events.select("offset", "partition").distinct().count()
    assert events.count() == N - N // BAD_EVERY
    assert quarantine.count() == N // BAD_EVERY
