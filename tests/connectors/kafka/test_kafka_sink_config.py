"""Kafka sink set-up: what is checked before a query starts, and what importing the sink does."""

from __future__ import annotations

import subprocess
import sys

import pytest

from connectors.kafka.commit import KafkaCommitter
from connectors.kafka.progress import SinkProgress
from connectors.kafka.settings import KafkaSinkSettings
from spark_ext.jobrun import REPO, run_job
from spark_ext.sinks.errors import DriverFencedError, TransactionTimeoutError

pytestmark = pytest.mark.integration


def test_importing_the_kafka_sinks_leaves_the_kafka_logger_level_alone():
    code = (
        "import logging, connectors.kafka.slices, connectors.kafka.idempotent, connectors.sinks;"
        "print(logging.getLogger('kafka').level)"
    )
    got = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True
    )
    assert got.stdout.strip() == str(0)  # NOTSET: the application decides


def test_one_sink_id_writing_two_topics_does_not_fence_itself(kafka_bootstrap, new_topic):
    """The transactional id names the topic too (the FLINK-11654 pattern): two queries with one
    sink id on two topics each keep their producer."""
    a, b = new_topic("two-a", partitions=1), new_topic("two-b", partitions=1)
    first = KafkaCommitter(KafkaSinkSettings(kafka_bootstrap, a, "shared"))
    second = KafkaCommitter(KafkaSinkSettings(kafka_bootstrap, b, "shared"))
    try:
        first.producer()
        second.producer()
        first.record_progress(0, {}, 0)  # a fenced producer raises here
        second.record_progress(0, {}, 0)
        assert SinkProgress(kafka_bootstrap, a, "shared").read().batch_id == 0
        assert SinkProgress(kafka_bootstrap, b, "shared").read().batch_id == 0
    finally:
        first.close()
        second.close()


def test_kafka_job_with_a_missing_input_topic_fails_at_start_naming_it(tmp_path):
    missing = f"no-such-input-{tmp_path.name}"
    run = run_job(
        "jobs.exactly_once_kafka",
        [
            "--profile",
            "test",
            "--topic",
            missing,
            "--out",
            f"out-{tmp_path.name}",
            "--sink-id",
            "missing_in",
            "--checkpoint",
            str(tmp_path / "chk"),
        ],
        timeout_s=120,
    )
    assert not run.ok
    assert "TopicMissingError" in run.output_tail and missing in run.output_tail
    assert run.seconds < 60  # before any JVM starts, not after the query did


def test_transaction_timeout_above_the_broker_maximum_fails_at_start(kafka_bootstrap, new_topic):
    topic = new_topic("timeout", partitions=1)
    committer = KafkaCommitter(
        KafkaSinkSettings(kafka_bootstrap, topic, "k", transaction_timeout_ms=900_001)
    )
    with pytest.raises(TransactionTimeoutError) as err:
        committer.recover()
    assert err.value.setting == "transaction_timeout_ms"


def test_an_older_driver_of_a_two_phase_kafka_sink_is_refused_without_fencing_the_newer(
    kafka_bootstrap, new_topic
):
    """Each start records a run epoch before it fences; a driver of an older start is refused
    before it re-initialises the transactional id, so it cannot abort the live transaction."""
    topic = new_topic("epoch", partitions=2)

    def committer(run_epoch=None):
        return KafkaCommitter(
            KafkaSinkSettings(kafka_bootstrap, topic, "epoch", run_epoch=run_epoch)
        )

    def start() -> int:
        c = committer()
        try:
            return c.recover()
        finally:
            c.close()

    old_epoch = start()
    new_epoch = start()
    assert new_epoch == old_epoch + 1
    live, zombie = committer(new_epoch), committer(old_epoch)
    try:
        live.producer()
        with pytest.raises(DriverFencedError) as err:
            zombie.record_progress(0, {}, 0)
        assert (err.value.epoch, err.value.current) == (old_epoch, new_epoch)
        live.record_progress(0, {}, 0)  # its producer was not fenced
        assert SinkProgress(kafka_bootstrap, topic, "epoch").read().batch_id == 0
    finally:
        live.close()
        zombie.close()
