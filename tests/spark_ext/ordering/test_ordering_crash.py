"""The divergence proof: an EWMA fold after a driver kill and replay, with and without the buffer.

Mechanism (engineered so that the divergence is reliable, not a race): one sensor's readings
are spread over both partitions of the topic. The clean run reads the whole topic in one
batch. The crashed run was reading with a rate limit (batches of at most ``LIMIT`` offsets)
when it was SIGKILLed after batch 0's output landed but before Spark's commit log; the
restart replays batch 0 with the same offsets (Spark's offset log pins them) and then -- as a
restart after downtime does, catching up the backlog -- reads the rest as one batch. So the
two runs fold the same rows under different batch plans. Without the buffer the EWMA folds
rows in arrival order, i.e. per batch one partition's rows before the other's, so the folded
sequences and the values differ. With the buffer, rows are released in event-time order
whatever the plan: identical output. Spark itself never re-plans a logged batch; the
divergence is in what the kill changes around it (batch boundaries), plus arrival order
inside a batch, which Spark does not fix either.
"""

from __future__ import annotations

import itertools

import pytest
from chispa import assert_df_equality

from jobs.ordering_dedup import RESULT_COLUMNS, PipelineOptions, produce_readings
from tests.conftest import kill_in_turn
from tests.spark_ext.conftest import run_pipeline

pytestmark = [pytest.mark.integration, pytest.mark.crash]

LIMIT = 50
SENSORS, PER_SENSOR = 4, 30


def clean_and_crashed(spark, bootstrap, topic, tmp_path, buffered: bool):
    """The EWMA output of a clean run, and of a run killed after batch 0's output then restarted."""
    options = PipelineOptions(buffered=buffered, dedup=False)
    clean = run_pipeline(spark, bootstrap, topic, tmp_path / "clean", options)
    root = tmp_path / "crashed"
    args = ["--profile", "test", "--bootstrap", bootstrap, "--topic", topic, "--out", str(root)]
    args += ["--no-dedup"] if buffered else ["--no-dedup", "--no-buffer"]
    kill_in_turn("jobs.ordering_dedup", args, [("dedup.after_output@0", LIMIT)])
    # The restart catches up: batch 0 replayed with its logged offsets, the rest in one batch.
    crashed = run_pipeline(spark, bootstrap, topic, root, options)
    return clean.select(*RESULT_COLUMNS), crashed.select(*RESULT_COLUMNS)


@pytest.fixture
def readings_topic(kafka_bootstrap, new_topic):
    topic = new_topic("readings", partitions=2)
    produce_readings(kafka_bootstrap, topic, sensors=SENSORS, per_sensor=PER_SENSOR)
    return topic


def test_ewma_without_buffer_diverges_after_kill_and_replay(
    spark, kafka_bootstrap, readings_topic, tmp_path
):
    clean, crashed = clean_and_crashed(spark, kafka_bootstrap, readings_topic, tmp_path, False)
    # Same readings in both (no loss, no duplicate: the sink is idempotent) ...
    assert clean.count() == crashed.count() == SENSORS * PER_SENSOR
    assert_df_equality(
        clean.select("record_id", "temp_f"),
        crashed.select("record_id", "temp_f"),
        ignore_row_order=True,
    )
    # ... but the order-sensitive values differ.
    a = {r.record_id: r.ewma_f for r in clean.collect()}
    b = {r.record_id: r.ewma_f for r in crashed.collect()}
    differing = [k for k in a if a[k] != b[k]]
    assert len(differing) > SENSORS, f"expected EWMA divergence, {len(differing)} values differ"


def test_ewma_with_buffer_is_identical_after_kill_and_replay(
    spark, kafka_bootstrap, readings_topic, tmp_path
):
    clean, crashed = clean_and_crashed(spark, kafka_bootstrap, readings_topic, tmp_path, True)
    assert clean.count() == SENSORS * PER_SENSOR
    assert_df_equality(clean, crashed, ignore_row_order=True)
    # And the sequence numbers follow event time: the fold saw each sensor in order.
    rows = sorted(clean.collect(), key=lambda r: (r.key, r.seq))
    for prev, cur in itertools.pairwise(rows):
        if prev.key == cur.key:
            assert prev.event_time < cur.event_time
