"""Kafka sink set-up: what is checked before a query starts, and what importing the sink does."""

from __future__ import annotations

import subprocess
import sys

import pytest

from connectors.kafka.sink import KafkaCommitter, KafkaSinkSettings
from spark_ext.jobrun import REPO, run_job
from spark_ext.sinks.errors import DriverFencedError
from spark_ext.sinks.protocol import Outcome, commit_batch

pytestmark = pytest.mark.integration


def test_importing_the_kafka_sinks_leaves_the_kafka_logger_level_alone():
    code = (
        "import logging, connectors.kafka.sink, connectors.sinks;"
        "print(logging.getLogger('kafka').level)"
    )
    got = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True
    )
    assert got.stdout.strip() == str(0)  # NOTSET: the application decides


def test_one_sink_id_writing_two_topics_does_not_fence_itself(kafka_bootstrap, new_topic, tmp_path):
    """The transactional id names the topic too (the FLINK-11654 pattern): two queries with one
    sink id on two topics each keep their producer."""
    a, b = new_topic("two-a", partitions=1), new_topic("two-b", partitions=1)
    first = KafkaCommitter(KafkaSinkSettings(kafka_bootstrap, a, "shared", str(tmp_path / "a")))
    second = KafkaCommitter(KafkaSinkSettings(kafka_bootstrap, b, "shared", str(tmp_path / "b")))
    try:
        first.producer()
        second.producer()
        assert commit_batch(first, 0, []) is Outcome.COMMITTED
        assert commit_batch(second, 0, []) is Outcome.COMMITTED
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


def test_an_older_driver_of_a_two_phase_kafka_sink_is_refused_without_fencing_the_newer(
    kafka_bootstrap, new_topic, tmp_path
):
    """Each start records a run epoch before it fences; a driver of an older start is refused
    before it re-initialises the transactional id, so it cannot abort the live transaction."""
    topic = new_topic("epoch", partitions=2)

    def committer(run_epoch=None):
        return KafkaCommitter(
            KafkaSinkSettings(kafka_bootstrap, topic, "epoch", str(tmp_path), run_epoch=run_epoch)
        )

    def start() -> int:
        c = committer()
        try:
            c.recover(fence=True)
        finally:
            c.close()
        assert c.started_epoch is not None
        return c.started_epoch

    old_epoch = start()
    new_epoch = start()
    assert new_epoch == old_epoch + 1
    live, zombie = committer(new_epoch), committer(old_epoch)
    try:
        live.producer()
        with pytest.raises(DriverFencedError) as err:
            commit_batch(zombie, 0, [])
        assert (err.value.epoch, err.value.current) == (old_epoch, new_epoch)
        assert commit_batch(live, 0, []) is Outcome.COMMITTED  # its producer was not fenced
    finally:
        live.close()
        zombie.close()
