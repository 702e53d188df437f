"""The Kafka agent's snapshots: bounded restart, trimmed log, same state and end events."""

from __future__ import annotations

import json
import uuid

import pytest
from kafka import KafkaConsumer, TopicPartition

import spark_ext.tracker.agent as agent_module
import spark_ext.tracker.kafka_agent as kafka_agent_module
from spark_ext.tracker.errors import TrackerLogCorrupt
from spark_ext.tracker.kafka_agent import KafkaTrackingAgent
from tests.spark_ext.tracker.test_tracker_agent import window_batch


def run_batches(agent: KafkaTrackingAgent, batches: int) -> None:
    agent.declare("w", ["t:0"])
    for b in range(batches):
        agent.apply(window_batch(b, b, [100 + b, 200 + b], {"t:0": (b + 1) * 10_000}))


def log_start(bootstrap: str, topic: str) -> int:
    consumer = KafkaConsumer(bootstrap_servers=bootstrap)
    try:
        tp = TopicPartition(topic, 0)
        return int(consumer.beginning_offsets([tp])[tp])
    finally:
        consumer.close()


def test_kafka_agent_restarts_from_a_snapshot_and_trims_its_log(kafka_bootstrap, monkeypatch):
    """Thresholds through the module constant, so this also runs (and fails) on an agent
    without snapshots."""
    name = f"t-{uuid.uuid4().hex[:10]}"
    plain_name = f"t-{uuid.uuid4().hex[:10]}"
    monkeypatch.setattr(agent_module, "SNAPSHOT_EVERY", 10**9, raising=False)
    plain = KafkaTrackingAgent(kafka_bootstrap, plain_name)
    run_batches(plain, 23)
    monkeypatch.setattr(agent_module, "SNAPSHOT_EVERY", 5, raising=False)
    compacted = KafkaTrackingAgent(kafka_bootstrap, name)
    run_batches(compacted, 23)

    replayed = []
    real = kafka_agent_module.replay_record
    monkeypatch.setattr(
        kafka_agent_module, "replay_record", lambda s, r: replayed.append(1) or real(s, r)
    )
    reopened = KafkaTrackingAgent(kafka_bootstrap, name)
    monkeypatch.setattr(kafka_agent_module, "replay_record", real)
    assert len(replayed) < 5  # not the 24 records of the history
    assert reopened.state() == plain.state()
    assert reopened.end_events(0, 10**9) == plain.end_events(0, 10**9)
    assert [e.seq for e in reopened.end_events(20, 22)] == [21, 22]
    assert log_start(kafka_bootstrap, reopened.log_topic) > 0  # covered records deleted
    # a replayed batch after the restart is still a duplicate, a new one still applies
    assert reopened.apply(window_batch(22, 22, [122, 222], {"t:0": 230_000})) == []
    assert [e.seq for e in reopened.apply(window_batch(23, 23, [1], {"t:0": 240_000}))] == [24]
    for a in (compacted, plain, reopened):
        a.close()


def newest_chunk(bootstrap: str, topic: str) -> tuple[int, dict]:
    """Offset and header of the last committed record of a snapshot topic."""
    consumer = KafkaConsumer(
        bootstrap_servers=bootstrap, isolation_level="read_committed", enable_auto_commit=False
    )
    try:
        tp = TopicPartition(topic, 0)
        consumer.assign([tp])
        end = consumer.end_offsets([tp])[tp]
        consumer.seek(tp, max(0, end - 50))
        last = None
        for _ in range(30):  # bounded: a stuck read fails the test instead of hanging it
            if consumer.position(tp) >= end:
                break
            for rec in consumer.poll(timeout_ms=2_000).get(tp, []):
                last = rec
        assert last is not None
        return last.offset, json.loads(last.value.partition(b"\n")[0])
    finally:
        consumer.close()


def append_bad_snapshot(bootstrap: str, topic: str, prev: int, header: dict) -> None:
    """A snapshot record that does not verify (its data is not what its checksum says),
    pointing at the snapshot before it: bit rot, or a chunk lost, in the newest snapshot."""
    from kafka import KafkaProducer

    bad = dict(header, i=0, n=1, bytes=5, sha256="0" * 64, prev=prev, slot=1 - header["slot"])
    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all")
    try:
        producer.send(topic, key=b"x.0", value=json.dumps(bad).encode() + b"\n{bad}", partition=0)
        producer.flush()
    finally:
        producer.close()


def test_a_newest_snapshot_that_does_not_verify_falls_back_to_the_one_before(
    kafka_bootstrap, monkeypatch
):
    """The fallback path of ``newest_snapshot``: the previous snapshot plus the log after it
    (never trimmed: the log is trimmed below the *previous* snapshot only) give the same state;
    two snapshots that do not verify with a trimmed log are TrackerLogCorrupt, never a wrong
    (empty) state."""
    name = f"t-{uuid.uuid4().hex[:10]}"
    plain = KafkaTrackingAgent(kafka_bootstrap, f"t-{uuid.uuid4().hex[:10]}", snapshot_every=10**9)
    run_batches(plain, 23)
    agent = KafkaTrackingAgent(kafka_bootstrap, name, snapshot_every=5)
    run_batches(agent, 23)
    agent.close()
    snapshots = agent.snapshot_topic
    last, header = newest_chunk(kafka_bootstrap, snapshots)
    append_bad_snapshot(kafka_bootstrap, snapshots, last, header)

    reopened = KafkaTrackingAgent(kafka_bootstrap, name, snapshot_every=5)
    assert reopened.load_figures["snapshot_bytes"] == header["bytes"]  # the one before
    assert reopened.state() == plain.state()
    assert reopened.end_events(0, 10**9) == plain.end_events(0, 10**9)
    assert reopened.apply(window_batch(22, 22, [122, 222], {"t:0": 230_000})) == []
    assert [e.seq for e in reopened.apply(window_batch(23, 23, [1], {"t:0": 240_000}))] == [24]
    reopened.close()

    for _ in range(2):  # the newest and the one before it do not verify
        newest, newest_header = newest_chunk(kafka_bootstrap, snapshots)
        append_bad_snapshot(kafka_bootstrap, snapshots, newest, dict(newest_header, slot=0))
    assert log_start(kafka_bootstrap, agent.log_topic) > 0
    with pytest.raises(TrackerLogCorrupt, match="no whole snapshot"):
        KafkaTrackingAgent(kafka_bootstrap, name, snapshot_every=5)
    plain.close()
