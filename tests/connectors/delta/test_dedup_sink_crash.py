"""DeltaDedupSink: redeliveries plus a SIGKILL at every step of the sink change nothing.

The input topic holds every third reading twice (a producer retry, three records later in the
same partition). The job (``jobs.dedup_delta``) is killed five times in a row, each run at a
different named step of a later batch and with a different batch plan:

* ``dedup_delta.1.staged``    -- every bucket decided in its task, filters saved, nothing
  committed (the kill comes from a task)
* ``dedup_delta.2.cataloged`` -- catalog committed, output not
* ``delta2pc.3.committed``    -- output committed, filters of the batch not saved
* ``dedup_delta.3.written``   -- the same, seen from the dedup sink
* ``dedup_delta.4.cleaned``   -- everything done but Spark's commit log

Each restart replays the killed batch from the checkpoint. The final output must equal a clean
run over a topic without duplicates (chispa), with each id once in the catalog and no staged
file left behind. The same holds when the tasks of a batch fail on attempt 0 right after they
saved their buckets' filters and staged their files (Spark retries them).
"""

from __future__ import annotations

import pytest
from chispa import assert_df_equality

from jobs.dedup_delta import DedupPaths, start
from jobs.ordering_dedup import produce_readings
from spark_ext import storage
from spark_ext.jobrun import run_job
from tests.conftest import await_done, kill_in_turn

pytestmark = [pytest.mark.integration, pytest.mark.crash]

SENSORS, PER_SENSOR = 3, 60
VALUES = ["reading_id", "sensor", "event_time", "temp_c"]
KILLS = [
    ("dedup_delta.1.staged@0", 30),
    ("dedup_delta.2.cataloged@1", 45),
    ("delta2pc.3.committed@2", 25),
    ("dedup_delta.3.written@3", 35),
    ("dedup_delta.4.cleaned@4", 40),
]


def test_kills_at_every_step_give_the_clean_duplicate_free_output(
    spark, kafka_bootstrap, readings_with_copies, tmp_path
):
    clean_topic, dup_topic, produced = readings_with_copies("dedup", SENSORS, PER_SENSOR, 3)
    assert produced > sum(mo for _, mo in KILLS) * 1.2  # every kill lands in a real batch

    clean_paths = DedupPaths(tmp_path / "clean")
    query, _ = start(spark, kafka_bootstrap, clean_topic, clean_paths, max_offsets_per_trigger=50)
    await_done(query, 600)
    assert query.exception() is None
    clean = spark.read.format("delta").load(str(clean_paths.unique)).select(*VALUES)
    assert clean.count() == SENSORS * PER_SENSOR

    paths = DedupPaths(tmp_path / "crashed")
    args = ["--profile", "test", "--bootstrap", kafka_bootstrap, "--topic", dup_topic]
    args += ["--out", str(paths.root)]
    kill_in_turn("jobs.dedup_delta", args, KILLS)
    query, _ = start(spark, kafka_bootstrap, dup_topic, paths, max_offsets_per_trigger=70)
    await_done(query, 600)
    assert query.exception() is None

    crashed = spark.read.format("delta").load(str(paths.unique)).select(*VALUES)
    assert_df_equality(clean, crashed, ignore_row_order=True)
    assert_catalog_and_folders_clean(spark, paths)


def assert_catalog_and_folders_clean(spark, paths: DedupPaths) -> None:
    """The exact catalog holds each kept id once; no staged file is left unreferenced."""
    catalog = spark.read.format("delta").load(str(paths.catalog))
    assert catalog.count() == catalog.select("record_id").distinct().count() == SENSORS * PER_SENSOR
    from deltalake import DeltaTable

    for table in (paths.unique, paths.catalog):
        referenced = {p.rsplit("/", 1)[-1] for p in DeltaTable(str(table)).file_uris()}
        on_disk = {
            n.rsplit("/", 1)[-1]
            for n in storage.list_prefix(table)
            if n.endswith(".parquet") and not n.startswith("_delta_log/")
        }
        assert on_disk == referenced, table
    assert not storage.exists(paths.quarantine)


def test_tasks_failing_after_saving_their_filters_are_retried_without_losing_or_doubling_keys(
    spark, kafka_bootstrap, new_topic, tmp_path
):
    """Attempt 0 of every step-1 task of batch 1 fails after it staged its bucket's rows and
    catalog rows and saved the bucket's filters as version 1 (profile ``faults``: tasks are
    retried once). The retries start again from version 0 of the filters: the output is
    every reading once, the catalog every id once, and the failed attempts leave nothing."""
    topic = new_topic("dedup-retry", partitions=2)
    produce_readings(
        kafka_bootstrap,
        topic,
        sensors=SENSORS,
        per_sensor=PER_SENSOR,
        duplicate_every=3,
        duplicate_delay=3,
    )
    paths = DedupPaths(tmp_path / "retried")
    point = "dedup_delta.1.staged"
    args = ["--profile", "faults", "--bootstrap", kafka_bootstrap, "--topic", topic]
    run = run_job(
        "jobs.dedup_delta",
        [*args, "--out", str(paths.root), "--max-offsets-per-trigger", "70"],
        fault=f"{point}@1:raise",
        timeout_s=600,
    )
    assert run.ok, run.output_tail
    failed = [f for f in run.faults if f["point"] == point]
    assert failed and all(f["attempt"] == 0 and f["batch"] == 1 for f in failed), run.faults

    out = spark.read.format("delta").load(str(paths.unique))
    assert out.count() == out.select("reading_id").distinct().count() == SENSORS * PER_SENSOR
    assert_catalog_and_folders_clean(spark, paths)
