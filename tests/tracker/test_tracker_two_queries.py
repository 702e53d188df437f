"""Two queries through Kafka: the downstream closes its windows by the upstream's tracker."""

from __future__ import annotations

import uuid

import pandas as pd
import pytest
from chispa import assert_df_equality

from connectors.kafka import produce
from jobs.tracker_two_queries import DOWN, UP, run_until_complete, start_two_queries
from jobs.tracker_windows import EPOCH, demo_records

pytestmark = pytest.mark.integration

N, PARTITIONS, STEP_MS = 90, 3, 700


def expected_totals(spark):
    epoch_ms = int(EPOCH.timestamp() * 1000)
    df = pd.DataFrame(
        [
            {"user": f"u{i % 7}", "t": epoch_ms + i * STEP_MS, "amount": float(i % 13)}
            for i in range(N)
        ]
    )
    df["window_start_ms"] = df["t"] // 10_000 * 10_000
    g = df.groupby("window_start_ms")
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
    topic = new_topic("trk-up", partitions=PARTITIONS)
    produce(kafka_bootstrap, topic, demo_records(N, PARTITIONS, step_ms=STEP_MS))
    name = f"two-{uuid.uuid4().hex[:8]}"
    up, down, agent = start_two_queries(
        spark, kafka_bootstrap, topic, PARTITIONS, f"{topic}-mid", tmp_path, name, 40
    )
    try:
        run_until_complete(up, down, agent, timeout_s=600)
    finally:
        up.stop()
        down.stop()

    got = spark.read.format("delta").load(str(tmp_path / "totals"))
    assert_df_equality(
        got,
        expected_totals(spark),
        ignore_row_order=True,
        ignore_nullable=True,
        ignore_column_order=True,
    )
    state = agent.state()
    # The downstream namespace has no source partitions: only the upstream's closes end it.
    assert state.sources[DOWN] == ()
    assert state.open_substreams() == [] and state.late_reports == 0
    ends = agent.end_events(0, 10**9)
    up_ends = sorted(e.substream.split("/", 1)[1] for e in ends if e.namespace == UP)
    down_ends = sorted(e.substream.split("/", 1)[1] for e in ends if e.namespace == DOWN)
    assert up_ends == down_ends and len(down_ends) == len(set(down_ends)) == 7
    # every downstream window ended after (closed by) its upstream window's end event
    seq = {e.substream: e.seq for e in ends}
    assert all(seq[f"{DOWN}/{w}"] > seq[f"{UP}/{w}"] for w in down_ends)
    agent.close()
