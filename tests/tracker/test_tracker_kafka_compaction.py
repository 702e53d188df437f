"""The Kafka agent's snapshots: bounded restart, trimmed log, same state and end events."""

from __future__ import annotations

import uuid

from kafka import KafkaConsumer, TopicPartition

import spark_ext.tracker.kafka_agent as kafka_agent_module
from spark_ext.tracker.kafka_agent import KafkaTrackingAgent
from tests.tracker.test_tracker_agent import window_batch


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
    monkeypatch.setattr(kafka_agent_module, "SNAPSHOT_EVERY", 10**9, raising=False)
    plain = KafkaTrackingAgent(kafka_bootstrap, plain_name)
    run_batches(plain, 23)
    monkeypatch.setattr(kafka_agent_module, "SNAPSHOT_EVERY", 5, raising=False)
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
    assert log_start(kafka_bootstrap, reopened.topics.log) > 0  # covered records deleted
    # a replayed batch after the restart is still a duplicate, a new one still applies
    assert reopened.apply(window_batch(22, 22, [122, 222], {"t:0": 230_000})) == []
    assert [e.seq for e in reopened.apply(window_batch(23, 23, [1], {"t:0": 240_000}))] == [24]
    for a in (compacted, plain, reopened):
        a.close()
