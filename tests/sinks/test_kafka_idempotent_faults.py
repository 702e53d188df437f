"""The idempotent Kafka sink under task-level faults, run as the Kafka -> Kafka job.

* K2: a task that fails after part of its records are in the topic is retried
  (profile ``faults``: ``local[2,2]``); the retry must not re-send what attempt 0 sent.
* K3: two tasks of a batch with identical records (three input partitions with the same
  payloads, forwarded unchanged); a replay after a kill must not mistake one for the other.

Output is compared with the input, record for record, as a ``read_uncommitted`` consumer
sees it (the idempotent sink uses no transactions).
"""

from __future__ import annotations

from collections import Counter

import pytest
from conftest import EVENTS, MAX_OFFSETS
from sink_crash import JOB_TIMEOUT_S, kill_at_each_point

from connectors import kafka
from jobs.exactly_once_kafka import forward
from spark_ext.jobrun import run_job
from spark_ext.sinks.protocol import KAFKA_IDEMPOTENT

pytestmark = [pytest.mark.integration, pytest.mark.crash]

JOB = "jobs.exactly_once_kafka"
PARTIAL = KAFKA_IDEMPOTENT.point(2)


def job_args(topic, out, tmp_path, profile="test", *extra):
    return [
        "--profile", profile, "--topic", topic, "--out", out, "--mode", "idempotent",
        "--sink-id", "eo_idem_faults", "--checkpoint", str(tmp_path / "chk"),
        "--max-offsets-per-trigger", str(MAX_OFFSETS), *extra,
    ]  # fmt: skip


def output(bootstrap, topic) -> Counter:
    got = kafka.consume_all(bootstrap, topic, read_committed=False)
    return Counter((key, value) for _, _, key, value in got)


def test_idempotent_kafka_sink_task_retried_after_a_partial_write_sends_each_record_once(
    spark, kafka_bootstrap, events_topic, new_topic, tmp_path
):
    out = new_topic("idem-retry", partitions=3)
    rows = forward(kafka.read_batch(spark, kafka_bootstrap, events_topic)).collect()
    expected = Counter((r.key.encode() if r.key else None, r.value.encode()) for r in rows)

    run = run_job(
        JOB,
        job_args(events_topic, out, tmp_path, "faults"),
        fault=f"{PARTIAL}@1:raise",
        timeout_s=JOB_TIMEOUT_S,
    )

    assert run.ok, run.output_tail
    assert run.fired(PARTIAL, "raise")
    assert output(kafka_bootstrap, out) == expected
    assert sum(expected.values()) == EVENTS


@pytest.fixture
def same_payload_topic(kafka_bootstrap, new_topic):
    """Three partitions holding the same (key, value) sequence: identical task slices."""
    topic = new_topic("same-payload", partitions=3)
    per_partition = EVENTS // 3
    records = [
        (f"k{i}".encode(), f"payload-{i}".encode(), p)
        for p in range(3)
        for i in range(per_partition)
    ]
    kafka.produce(kafka_bootstrap, topic, records)
    return topic, Counter((k, v) for k, v, _ in records)


def test_idempotent_kafka_sink_replay_tells_apart_tasks_with_identical_records(
    kafka_bootstrap, same_payload_topic, new_topic, tmp_path
):
    topic, expected = same_payload_topic
    out = new_topic("idem-same", partitions=3)
    args = job_args(topic, out, tmp_path, "test", "--payload-only")

    kill_at_each_point(JOB, args, [f"{PARTIAL}@1"])

    assert output(kafka_bootstrap, out) == expected
