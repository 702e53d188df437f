"""Exactly-once = at-least-once + dedup: duplicate deliveries and driver kills change nothing.

The input topic holds every fifth reading twice (a producer retry, three records later in the
same partition), so a copy sometimes lands in the same batch as its original (caught exactly
in memory), sometimes after the original was released (a Bloom "maybe", resolved by the
catalog). The job is SIGKILLed twice -- once after batch 1's catalog append but before its
output (the replay then finds its own ids in the catalog: the coordinate rule), once after
batch 2's output but before Spark's commit log -- and restarted with a different rate limit
each time. The output must equal a clean run over a topic without duplicates.
"""

from __future__ import annotations

import pytest
from chispa import assert_df_equality
from pyspark.sql import functions as F

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

SENSORS, PER_SENSOR = 4, 30
VALUE_COLUMNS = [c for c in RESULT_COLUMNS if c not in ("topic", "partition", "offset")]


def read_output(spark, root):
    return spark.read.format("delta").load(str(PipelinePaths(root).ewma)).select(*VALUE_COLUMNS)


@pytest.mark.heavy
@pytest.mark.every_mode
def test_duplicates_and_kills_give_the_clean_duplicate_free_output(
    spark, kafka_bootstrap, new_topic, tmp_path
):
    clean_topic = new_topic("readings-clean", partitions=2)
    dup_topic = new_topic("readings-dups", partitions=2)
    produce_readings(kafka_bootstrap, clean_topic, sensors=SENSORS, per_sensor=PER_SENSOR)
    produced = produce_readings(
        kafka_bootstrap,
        dup_topic,
        sensors=SENSORS,
        per_sensor=PER_SENSOR,
        duplicate_every=5,
        duplicate_delay=3,
    )
    assert produced == SENSORS * PER_SENSOR * 6 // 5 + 2

    query, _ = start_pipeline(
        spark, kafka_bootstrap, clean_topic, PipelinePaths(tmp_path / "clean"), PipelineOptions()
    )
    await_done(query, 600)
    assert query.exception() is None
    clean = read_output(spark, tmp_path / "clean")
    assert clean.count() == SENSORS * PER_SENSOR

    root = tmp_path / "crashed"
    args = ["--profile", "test", "--bootstrap", kafka_bootstrap, "--topic", dup_topic]
    args += ["--out", str(root)]
    first = run_job(
        "jobs.ordering_dedup",
        [*args, "--max-offsets-per-trigger", "40"],
        fault="dedup.after_catalog@1",
        timeout_s=600,
    )
    assert first.killed and first.fired("dedup.after_catalog", "kill"), first.output_tail
    second = run_job(
        "jobs.ordering_dedup",
        [*args, "--max-offsets-per-trigger", "60"],
        fault="dedup.after_output@2",
        timeout_s=600,
    )
    assert second.killed and second.fired("dedup.after_output", "kill"), second.output_tail
    query, _ = start_pipeline(
        spark, kafka_bootstrap, dup_topic, PipelinePaths(root), PipelineOptions()
    )
    await_done(query, 600)
    assert query.exception() is None

    crashed = read_output(spark, root)
    assert_df_equality(clean, crashed, ignore_row_order=True)
    late = PipelinePaths(root).late
    assert not late.exists() or spark.read.format("delta").load(str(late)).count() == 0
    # The catalog holds each kept id once (its durable, exact half).
    catalog = spark.read.format("delta").load(str(PipelinePaths(root).catalog))
    assert catalog.count() == catalog.select("record_id").distinct().count() == SENSORS * PER_SENSOR
    assert catalog.where(F.col("coords").isNull()).count() == 0
