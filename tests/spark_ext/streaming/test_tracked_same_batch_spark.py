"""Through Spark and Kafka: a window's row is written by the micro-batch that read its closing rows.

Two partitions; the first produce fills window [0, 10 s) and is drained; the second produce
carries each partition's first row past 10 s. The result writer (a ``foreachBatch`` callable)
records the batch id of every row it is given; the query's progress says which batch read
the closing rows. Before, the window came one batch later (end event written by the driver
after that batch, read back by the next).
"""

from __future__ import annotations

import json

import pytest

from connectors.kafka import produce, read_stream
from jobs.tracker_windows import event, parse
from spark_ext.operators import Count, WindowAggregate
from spark_ext.sinks.trigger import Trigger
from spark_ext.streaming import Closing, TrackedStream
from spark_ext.tracker import LocalTrackingAgent, Tumbling

pytestmark = pytest.mark.integration


class Recorder:
    """A result writer that keeps ``(batch_id, row)`` of every row it is handed."""

    def __init__(self) -> None:
        self.rows: list[tuple[int, dict]] = []

    def __call__(self, df, batch_id: int) -> None:
        self.rows += [(batch_id, r.asDict()) for r in df.collect()]


def first_batch_reading(progress: list[dict], topic: str, ends: dict[str, int]) -> int:
    """The first batch whose Kafka end offsets reach ``ends`` (partition -> offset)."""
    for p in progress:
        for src in p["sources"]:
            offsets = src.get("endOffset") or {}
            if isinstance(offsets, str):
                offsets = json.loads(offsets)
            got = offsets.get(topic, {}) if isinstance(offsets, dict) else {}
            if got and all(int(got.get(k, -1)) >= v for k, v in ends.items()):
                return int(p["batchId"])
    raise AssertionError(f"no batch read {ends}: {[p['batchId'] for p in progress]}")


def start_count(
    spark, bootstrap, topic, agent, results, late, checkpoint, partitions=1, shards=2, marker=None
):
    """The tracked per-user count of 10 s windows (namespace ``w``) over ``topic``."""
    return (
        TrackedStream(
            parse(read_stream(spark, bootstrap, topic)),
            key="user_id",
            event_time="event_time",
            agent=agent,
            closing=Closing.partitions(topic, partitions),
            close_marker=marker,
        )
        .apply(Tumbling("10 seconds", namespace="w"), WindowAggregate(Count()), shards=shards)
        .start(
            results,
            checkpoint=str(checkpoint),
            late=late,
            trigger=Trigger(processing_time="0 seconds"),
        )
    )


def test_window_row_is_written_by_the_batch_that_read_its_closing_rows(
    spark, kafka_bootstrap, new_topic, tmp_path
):
    topic = new_topic("trk-same-batch", partitions=2)
    results, late = Recorder(), Recorder()
    agent = LocalTrackingAgent(tmp_path / "agent")
    chk = tmp_path / "chk"
    q = start_count(
        spark, kafka_bootstrap, topic, agent, results, late, chk, 2, marker="close_through"
    )
    try:
        produce(
            kafka_bootstrap,
            topic,
            [(b"a", event("a", 1.0, s * 1000), p) for p in (0, 1) for s in range(1, 9)],
        )
        q.processAllAvailable()
        produce(kafka_bootstrap, topic, [(b"b", event("b", 1.0, 10_500), p) for p in (0, 1)])
        q.processAllAvailable()
        closing_batch = first_batch_reading(q.recentProgress, topic, {"0": 9, "1": 9})
    finally:
        q.stop()

    windows = [(b, r["key"], r["count"]) for b, r in results.rows]
    assert windows == [(closing_batch, "a", 16)]
    assert late.rows == []


def test_a_restart_with_another_shard_count_is_refused_and_the_same_one_resumes_exactly(
    spark, kafka_bootstrap, new_topic, tmp_path
):
    """Operator state is keyed by shard: 2 -> 3 shards would leave key ``a``'s open window in
    its old shard and count its new rows in another (a split window, two rows), 3 -> 2 would
    strand a shard no row reaches (a silent loss). Before, the restart with 3 shards started
    and wrote keys d, e and f as two rows of 1 each."""
    from spark_ext.tracker.errors import CheckpointLayoutMismatch

    topic = new_topic("trk-shards", partitions=1)
    results, late = Recorder(), Recorder()
    agent = LocalTrackingAgent(tmp_path / "agent")

    def start(shards: int):
        chk = tmp_path / "chk"
        return start_count(spark, kafka_bootstrap, topic, agent, results, late, chk, shards=shards)

    produce(kafka_bootstrap, topic, [(k.encode(), event(k, 1.0, 1_000), 0) for k in "abcdef"])
    q = start(2)
    try:
        q.processAllAvailable()
    finally:
        q.stop()
    produce(kafka_bootstrap, topic, [(k.encode(), event(k, 1.0, 2_000), 0) for k in "abcdef"])
    with pytest.raises(CheckpointLayoutMismatch, match="shards=2"):
        start(3)
    produce(kafka_bootstrap, topic, [(b"z", event("z", 1.0, 10_500), 0)])
    q = start(2)
    try:
        q.processAllAvailable()
    finally:
        q.stop()
    assert sorted((r["key"], r["count"]) for _, r in results.rows) == [(k, 2) for k in "abcdef"]
    assert late.rows == []


class PartitionRecorder(Recorder):
    """Also keeps the Spark partitions (operator-stage tasks) the result rows came from."""

    def __init__(self) -> None:
        super().__init__()
        self.partitions: set[int] = set()

    def __call__(self, df, batch_id: int) -> None:
        from pyspark.sql import functions as F

        super().__call__(df, batch_id)
        self.partitions |= {r[0] for r in df.select(F.spark_partition_id()).distinct().collect()}


def test_the_operator_stage_runs_its_two_shards_in_two_tasks(
    spark, kafka_bootstrap, new_topic, tmp_path
):
    """Before, shard keys 0 and 1 both hashed to shuffle partition 1: one task ran every
    shard and the stage used one core of two."""
    from spark_ext.streaming.placement import shard_keys

    keys = shard_keys(2, 2)
    placed = spark.sql(
        "select pmod(hash(cast(k as int)), 2) p from values "
        + ", ".join(f"({k})" for k in keys)
        + " as t(k)"
    )
    assert [r.p for r in placed.collect()] == [0, 1]  # Spark agrees with placement.py

    topic = new_topic("trk-two-tasks", partitions=1)
    results, late = PartitionRecorder(), Recorder()
    produce(kafka_bootstrap, topic, [(k.encode(), event(k, 1.0, 1_000), 0) for k in "abcdefgh"])
    produce(kafka_bootstrap, topic, [(b"z", event("z", 1.0, 10_500), 0)])
    agent = LocalTrackingAgent(tmp_path / "agent")
    q = start_count(spark, kafka_bootstrap, topic, agent, results, late, tmp_path / "chk")
    try:
        q.processAllAvailable()
    finally:
        q.stop()
    assert sorted(r["key"] for _, r in results.rows) == list("abcdefgh")
    assert results.partitions == {0, 1}
