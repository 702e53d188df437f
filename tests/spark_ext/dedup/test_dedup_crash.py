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

from jobs.ordering_dedup import RESULT_COLUMNS, PipelinePaths
from tests.conftest import kill_in_turn
from tests.spark_ext.conftest import run_pipeline

pytestmark = [pytest.mark.integration, pytest.mark.crash]

SENSORS, PER_SENSOR = 4, 30
VALUE_COLUMNS = [c for c in RESULT_COLUMNS if c not in ("topic", "partition", "offset")]


@pytest.mark.heavy
@pytest.mark.every_mode
def test_duplicates_and_kills_give_the_clean_duplicate_free_output(
    spark, kafka_bootstrap, readings_with_copies, tmp_path
):
    clean_topic, dup_topic, produced = readings_with_copies("readings", SENSORS, PER_SENSOR, 5)
    assert produced == SENSORS * PER_SENSOR * 6 // 5 + 2

    clean = run_pipeline(spark, kafka_bootstrap, clean_topic, tmp_path / "clean")
    clean = clean.select(*VALUE_COLUMNS)
    assert clean.count() == SENSORS * PER_SENSOR

    root = tmp_path / "crashed"
    args = ["--profile", "test", "--bootstrap", kafka_bootstrap, "--topic", dup_topic]
    args += ["--out", str(root)]
    kills = [("dedup.after_catalog@1", 40), ("dedup.after_output@2", 60)]
    kill_in_turn("jobs.ordering_dedup", args, kills)
    crashed = run_pipeline(spark, kafka_bootstrap, dup_topic, root).select(*VALUE_COLUMNS)
    assert_df_equality(clean, crashed, ignore_row_order=True)
    late = PipelinePaths(root).late
    assert not late.exists() or spark.read.format("delta").load(str(late)).count() == 0
    # The catalog holds each kept id once (its durable, exact half).
    catalog = spark.read.format("delta").load(str(PipelinePaths(root).catalog))
    assert catalog.count() == catalog.select("record_id").distinct().count() == SENSORS * PER_SENSOR
    assert catalog.where(F.col("coords").isNull()).count() == 0
