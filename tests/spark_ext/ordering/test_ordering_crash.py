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

from jobs.ordering_dedup import (
    RESULT_COLUMNS,
    PipelineOptions,
    PipelinePaths,
    produce_readings,
    start_pipeline,
)
from spark_ext.jobrun import run_job
from tests.conftest import await_done

pytestmark = [pytest.mark.integration, pytest.mark.crash]

LIMIT = 50
SENSORS, PER_SENSOR = 4, 30


def run_in_process(spark, bootstrap, topic, root, options):
    query, _ = start_pipeline(spark, bootstrap, topic, PipelinePaths(root), options)
    await_done(query, 600)
    assert query.exception() is None
    return spark.read.format("delta").load(str(PipelinePaths(root).ewma)).select(*RESULT_COLUMNS)


def crash_then_restart(spark, bootstrap, topic, root, buffered: bool):
    args = ["--profile", "test", "--bootstrap", bootstrap, "--topic", topic, "--out", str(root)]
    args += ["--no-dedup", "--max-offsets-per-trigger", str(LIMIT)]
    if not buffered:
        args.append("--no-buffer")
    run = run_job("jobs.ordering_dedup", args, fault="dedup.after_output@0", timeout_s=600)
    assert run.killed and run.fired("dedup.after_output", "kill"), run.output_tail
    # The restart catches up: batch 0 replayed with its logged offsets, the rest in one batch.
    return run_in_process(
        spark, bootstrap, topic, root, PipelineOptions(buffered=buffered, dedup=False)
    )


@pytest.fixture
def readings_topic(kafka_bootstrap, new_topic):
    topic = new_topic("readings", partitions=2)
    produce_readings(kafka_bootstrap, topic, sensors=SENSORS, per_sensor=PER_SENSOR)
    return topic


def test_ewma_without_buffer_diverges_after_kill_and_replay(
    spark, kafka_bootstrap, readings_topic, tmp_path
):
    clean = run_in_process(
        spark,
        kafka_bootstrap,
        readings_topic,
        tmp_path / "clean",
        PipelineOptions(buffered=False, dedup=False),
    )
    crashed = crash_then_restart(
        spark, kafka_bootstrap, readings_topic, tmp_path / "crashed", buffered=False
    )
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
    clean = run_in_process(
        spark,
        kafka_bootstrap,
        readings_topic,
        tmp_path / "clean",
        PipelineOptions(buffered=True, dedup=False),
    )
    crashed = crash_then_restart(
        spark, kafka_bootstrap, readings_topic, tmp_path / "crashed", buffered=True
    )
    assert clean.count() == SENSORS * PER_SENSOR
    assert_df_equality(clean, crashed, ignore_row_order=True)
    # And the sequence numbers follow event time: the fold saw each sensor in order.
    rows = sorted(clean.collect(), key=lambda r: (r.key, r.seq))
    for prev, cur in itertools.pairwise(rows):
        if prev.key == cur.key:
            assert prev.event_time < cur.event_time
