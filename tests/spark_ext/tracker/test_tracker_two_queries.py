"""Two queries through Kafka: the downstream closes its windows by the upstream's tracker.

One subprocess job run is killed mid-pipeline and restarted from the checkpoints; the
downstream table must equal the windows computed from the input, each emitted once.
"""

from __future__ import annotations

import uuid

import pandas as pd
import pytest

from connectors.kafka import produce
from jobs.tracker_two_queries import DOWN, UP
from jobs.tracker_windows import demo_records
from spark_ext.jobrun import run_job
from spark_ext.tracker.kafka_agent import KafkaTrackingAgent
from tests.spark_ext.tracker.conftest import assert_table_is, demo_events

pytestmark = [pytest.mark.integration, pytest.mark.crash]

N, PARTITIONS, STEP_MS = 90, 3, 700


def expected_totals(spark):
    """One row per 10 s window: distinct users, events and amount, from the generator."""
    g = demo_events(N, STEP_MS).groupby("window_start_ms")
    out = pd.DataFrame(
        {
            "users": g["user"].nunique(),
            "events": g.size().astype(float),
            "amount": g["amount"].sum(),
        }
    ).reset_index()
    out["window_end_ms"] = out["window_start_ms"] + 10_000
    out["key"] = "all"
    cols = ["window_start_ms", "window_end_ms", "key", "users", "events", "amount"]
    return spark.createDataFrame(out[cols].astype({"users": "int64"}))


def test_downstream_windows_are_emitted_once_complete_closed_by_the_upstream_tracker(
    spark, kafka_bootstrap, new_topic, tmp_path
):
    """SIGKILL after a batch's output is written and its reports applied, before Spark's
    commit (in whichever query gets there first): the restart replays that batch -- the
    idempotent Kafka sink and the Delta sink skip it, the agent ignores its reports -- and
    every downstream window is still emitted once, with every row, though the downstream has
    no watermark and no source partitions of its own: only the upstream's closes end it."""
    topic = new_topic("trk-up", partitions=PARTITIONS)
    produce(kafka_bootstrap, topic, demo_records(N, PARTITIONS, step_ms=STEP_MS))
    name = f"two-{uuid.uuid4().hex[:8]}"
    args = ["--profile", "test", "--topic", topic, "--partitions", str(PARTITIONS)]
    args += ["--out", str(tmp_path), "--agent", name, "--max-offsets-per-trigger", "50"]
    killed = run_job(
        "jobs.tracker_two_queries", args, fault="tracker.after_reports@1", timeout_s=600
    )
    assert killed.killed and killed.fired("tracker.after_reports", "kill"), killed.output_tail
    again = run_job("jobs.tracker_two_queries", args, timeout_s=600)
    assert again.ok, again.output_tail

    assert_table_is(spark, tmp_path / "totals", expected_totals(spark))
    agent = KafkaTrackingAgent(kafka_bootstrap, name)
    state = agent.state()
    assert state.sources[DOWN] == ()  # nothing but the upstream's closes can end these
    assert state.open_substreams() == [] and state.late_reports == 0
    ends = agent.end_events(0, 10**9)
    assert len(ends) == len({e.substream for e in ends})  # each end event once
    up_ends = sorted(e.substream.split("/", 1)[1] for e in ends if e.namespace == UP)
    down_ends = sorted(e.substream.split("/", 1)[1] for e in ends if e.namespace == DOWN)
    assert up_ends == down_ends and len(down_ends) == 7
    # every downstream window ended after (closed by) its upstream window's end event
    seq = {e.substream: e.seq for e in ends}
    assert all(seq[f"{DOWN}/{w}"] > seq[f"{UP}/{w}"] for w in down_ends)
    agent.close()
