"""Kafka sinks killed (SIGKILL) at every numbered step (the two-phase sink's: in
``test_kafka_sliced.py``), at random times, and Spark's own sink killed the same way as the
negative control.

The output topic must then hold exactly the records a run that never crashed writes (for the
two-phase sink: as read by a ``read_committed`` consumer), computed once in-process.
"""

from __future__ import annotations

from collections import Counter

import pytest
from chispa import assert_df_equality

from connectors.kafka.progress import SinkProgress
from jobs.eo_spark_kafka_sink import WRITTEN
from spark_ext.recovery.kills import (
    batches_for,
    kill_at_each_point,
    kill_at_random_times,
)
from spark_ext.sinks.protocol import KAFKA_IDEMPOTENT
from tests.connectors.conftest import EVENTS, MAX_OFFSETS, RANDOM_KILLS, output_records

pytestmark = [pytest.mark.integration, pytest.mark.crash]

JOB = "jobs.exactly_once_kafka"


def job_args(topic, out, tmp_path, mode, max_offsets=MAX_OFFSETS):
    """``mode`` is ``two_phase`` (a transaction per task) or ``idempotent``."""
    return [
        "--profile", "test", "--topic", topic, "--out", out, "--mode", mode,
        "--sink-id", f"eo_{mode}", "--checkpoint", str(tmp_path / "chk"),
        "--max-offsets-per-trigger", str(max_offsets),
    ]  # fmt: skip


def assert_topic_is_exactly(spark, bootstrap, topic, expected, read_committed=True):
    """chispa comparison of the topic's (key, value) records with the clean run's."""
    schema = "key string, value string"

    def frame(records):
        return spark.createDataFrame(
            [(k.decode() if k else None, v.decode()) for k, v in records], schema
        )

    got = frame(output_records(bootstrap, topic, read_committed))
    assert_df_equality(got, frame(expected), ignore_row_order=True)


@pytest.mark.heavy
@pytest.mark.every_mode
def test_idempotent_kafka_sink_killed_at_every_step_writes_each_record_once(
    spark, kafka_bootstrap, events_topic, new_topic, clean_records, tmp_path
):
    out = new_topic("eoidem", partitions=3)
    points = [
        f"{KAFKA_IDEMPOTENT.point(1)}@0",  # nothing written
        f"{KAFKA_IDEMPOTENT.point(2)}@1",  # half of a partition written
        f"{KAFKA_IDEMPOTENT.point(3)}@1",  # all written (after a partial replay), not recorded
        f"{KAFKA_IDEMPOTENT.point(4)}@2",  # recorded, Spark's commit log not
    ]
    kill_at_each_point(JOB, job_args(events_topic, out, tmp_path, "idempotent"), points)

    # Every consumer, not only read_committed ones: no transactions are involved.
    assert_topic_is_exactly(spark, kafka_bootstrap, out, clean_records, read_committed=False)


RANDOM_MODES = ["two_phase", "idempotent"]


@pytest.mark.heavy
@pytest.mark.parametrize("mode", RANDOM_MODES)
def test_kafka_sink_killed_at_random_times_writes_each_record_once(
    spark, kafka_bootstrap, events_topic, new_topic, clean_records, tmp_path, mode
):
    out = new_topic(f"eo2pc-rand-{mode}", partitions=3)

    def recorded() -> int:
        got = SinkProgress(kafka_bootstrap, out, f"eo_{mode}").read()
        return got.batch_id if got is not None and got.batch_id is not None else -1

    args = job_args(events_topic, out, tmp_path, mode, batches_for(RANDOM_KILLS, EVENTS))
    runs = kill_at_random_times(JOB, args, RANDOM_KILLS, seed=11, progress=recorded)

    assert sum(r.killed for r in runs) == RANDOM_KILLS
    assert_topic_is_exactly(
        spark, kafka_bootstrap, out, clean_records, read_committed=mode != "idempotent"
    )


def test_spark_kafka_sink_killed_after_a_write_duplicates_the_batch(
    kafka_bootstrap, events_topic, new_topic, clean_records, tmp_path
):
    """Negative control: the same kill against Spark's own Kafka writer leaves duplicates."""
    out = new_topic("plain", partitions=3)
    args = [
        "--profile", "test", "--topic", events_topic, "--out", out,
        "--checkpoint", str(tmp_path / "chk"), "--max-offsets-per-trigger", str(MAX_OFFSETS),
    ]  # fmt: skip
    kill_at_each_point("jobs.eo_spark_kafka_sink", args, [f"{WRITTEN}@1"])

    got = output_records(kafka_bootstrap, out)
    counts = Counter(got)
    duplicated = [record for record, n in counts.items() if n > 1]
    assert sorted(counts) == sorted(set(clean_records))  # nothing lost...
    assert len(duplicated) == MAX_OFFSETS  # ...but all of batch 1 is in the topic twice
    assert len(got) == EVENTS + MAX_OFFSETS
