"""An idle partition: windows still end after a processing-time timeout, recorded as a
completeness downgrade; its rows that come later below the frontier go to the late output."""

from __future__ import annotations

import time

import pytest

from spark_ext.streaming.idle import IdlePolicy


def test_a_partition_without_progress_past_the_timeout_is_declared_idle_through_the_others():
    policy = IdlePolicy(2_000, mark=lambda topic, part, through: None)
    sources = ["t:0", "t:1", "t:2"]
    progress = {"t:0": 50_000, "t:1": 40_000, "t:2": 5_000}

    def decide(now, oldest_end=10_000):
        return policy.decide(sources, progress, oldest_end, now)

    assert decide(0) == []  # clocks start
    assert decide(1_999) == []
    assert decide(2_000) == [("t:2", 40_000)]  # through the lowest other frontier
    assert decide(3_000) == []  # not again before another timeout
    progress["t:2"] = 41_000  # it moves again: active; now t:1 has been still for 10 s
    assert decide(10_000, oldest_end=45_000) == [("t:1", 41_000)]
    assert decide(11_000, oldest_end=45_000) == []  # t:2 moved 1 s ago


def test_no_partition_is_declared_idle_while_no_window_waits_for_it():
    policy = IdlePolicy(1, mark=lambda topic, part, through: None)
    progress = {"t:0": 50_000, "t:1": 5_000}
    assert policy.decide(["t:0", "t:1"], progress, None, 0) == []
    assert policy.decide(["t:0", "t:1"], progress, None, 10_000) == []
    # the oldest open window ends at 5 s: t:1 has passed it, nothing waits for it
    assert policy.decide(["t:0", "t:1"], progress, 5_000, 20_000) == []


@pytest.mark.integration
def test_an_idle_partition_is_closed_by_the_timeout_and_its_later_rows_are_late(
    spark, kafka_bootstrap, new_topic, tmp_path
):
    from connectors.delta.idempotent import DeltaIdempotentWriter
    from connectors.kafka import produce, read_stream
    from jobs.tracker_windows import event, marker, parse
    from spark_ext.operators import Count, WindowAggregate
    from spark_ext.sinks.trigger import Trigger
    from spark_ext.streaming import Closing, IdlePolicy, TrackedStream
    from spark_ext.streaming.envelope import REASON_BELOW_FRONTIER, REASON_IDLE
    from spark_ext.tracker import LocalTrackingAgent, Tumbling

    topic = new_topic("trk-idle", partitions=2)
    agent = LocalTrackingAgent(tmp_path / "agent")

    def mark(t: str, partition: int, through_ms: int) -> None:
        produce(kafka_bootstrap, t, [(None, marker(through_ms), partition)])

    q = (
        TrackedStream(
            parse(read_stream(spark, kafka_bootstrap, topic)),
            key="user_id",
            event_time="event_time",
            agent=agent,
            closing=Closing.partitions(topic, 2),
            close_marker="close_through",
        )
        .apply(Tumbling("10 seconds", namespace="idle"), WindowAggregate(Count()))
        .start(
            DeltaIdempotentWriter(str(tmp_path / "windows"), "idle"),
            checkpoint=str(tmp_path / "chk"),
            late=DeltaIdempotentWriter(str(tmp_path / "late"), "idle.late"),
            trigger=Trigger(processing_time="0 seconds"),
            idle=IdlePolicy("2 seconds", mark),
        )
    )
    try:
        rows = [(b"u", event("u", 1.0, s * 1000), 0) for s in range(30)]
        rows += [(b"v", event("v", 1.0, s * 1000), 1) for s in range(5)]  # then silence
        produce(kafka_bootstrap, topic, rows)
        q.processAllAvailable()
        assert agent.state().open_substreams()  # [20 s, 30 s) waits for partition 1
        deadline = time.monotonic() + 240
        k = 0
        while agent.state().open_substreams() and time.monotonic() < deadline:
            k += 1  # partition 0 keeps closing (batches keep running); partition 1 says nothing
            produce(kafka_bootstrap, topic, [(None, marker(60_000 + k), 0)])
            q.processAllAvailable()
            time.sleep(1)
        assert agent.state().open_substreams() == []
        produce(kafka_bootstrap, topic, [(b"v", event("v", 1.0, 3_000), 1)])  # too late now
        produce(kafka_bootstrap, topic, [(None, marker(90_000), 0)])
        q.processAllAvailable()
    finally:
        q.stop()
    windows = spark.read.format("delta").load(str(tmp_path / "windows")).toPandas()
    late = spark.read.format("delta").load(str(tmp_path / "late")).toPandas()
    assert int(windows["count"].sum()) == 35  # every row before the silence, in its window
    data_late = late[late["reason"] != REASON_IDLE]
    assert data_late[["src_partition", "reason"]].values.tolist() == [[1, REASON_BELOW_FRONTIER]]
    downgrades = late[late["reason"] == REASON_IDLE]
    assert len(downgrades) >= 1 and set(downgrades["src_partition"]) == {1}
    assert downgrades["raw"].str.contains("declared_at_ms").all()


def test_the_idle_check_of_each_batch_reads_the_agent_without_copying_its_state(tmp_path):
    """Issue #12, scale: the handler asked the agent for a deep copy of its whole state in every
    batch of a query with an idle policy (``agent.state()``), which grows with the open
    windows; it needs only the partitions' progress and the oldest open window's end."""
    from spark_ext.streaming.handler import BatchHandler
    from spark_ext.streaming.idle import IdlePolicy
    from spark_ext.tracker.agent import LocalTrackingAgent
    from spark_ext.tracker.reports import Report, ReportKey, TaskReport

    class CountingCopies(LocalTrackingAgent):
        copies = 0

        def state(self):
            CountingCopies.copies += 1
            return super().state()

    agent = CountingCopies(tmp_path / "agent")
    agent.declare("w", ["t:0", "t:1"])
    body = TaskReport(
        "gate",
        0,
        xors={"w/0/10000": 5},
        counts={"w/0/10000": 1},
        ends={"w/0/10000": 10_000, "w/10000/20000": 20_000},
        progress={"t:0": 30_000, "t:1": 2_000},
    )
    agent.apply([Report(ReportKey("q", 0, "gate", 0), body)])

    def write(df, batch_id):
        raise AssertionError("not called")

    handler = BatchHandler(
        "q", agent, write, write, [], namespace="w", sources=("t:0", "t:1"),
        idle=IdlePolicy(100, mark=lambda topic, part, through: None),
    )  # fmt: skip
    assert handler._idle_decisions() == []  # the policy's clocks start
    time.sleep(0.15)
    assert handler._idle_decisions() == [("t:1", 30_000)]  # through the other partition
    assert CountingCopies.copies == 0
