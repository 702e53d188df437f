"""DeltaDedupSink: redeliveries plus a SIGKILL at every step of the sink change nothing.

The input topic holds every third reading twice (a producer retry, three records later in the
same partition). The job (``jobs.dedup_delta``) is killed five times in a row, each run at a
different named step of a later batch and with a different batch plan:

* ``dedup_delta.1.decided``   -- decided on the driver, nothing committed
* ``dedup_delta.2.cataloged`` -- catalog committed, output not
* ``delta2pc.3.committed``    -- output committed, filters of the batch not saved
* ``dedup_delta.3.written``   -- the same, seen from the dedup sink
* ``dedup_delta.4.saved``     -- everything done but Spark's commit log

Each restart replays the killed batch from the checkpoint. The final output must equal a clean
run over a topic without duplicates (chispa), with each id once in the catalog and no staged
file left behind.
"""

from __future__ import annotations

import pytest
from chispa import assert_df_equality

from jobs.dedup_delta import DedupPaths, start
from jobs.ordering_dedup import produce_readings
from spark_ext.jobrun import run_job
from tests.conftest import await_done

pytestmark = [pytest.mark.integration, pytest.mark.crash]

SENSORS, PER_SENSOR = 3, 60
VALUES = ["reading_id", "sensor", "event_time", "temp_c"]
KILLS = [
    ("dedup_delta.1.decided@0", 30),
    ("dedup_delta.2.cataloged@1", 45),
    ("delta2pc.3.committed@2", 25),
    ("dedup_delta.3.written@3", 35),
    ("dedup_delta.4.saved@4", 40),
]


def test_kills_at_every_step_give_the_clean_duplicate_free_output(
    spark, kafka_bootstrap, new_topic, tmp_path
):
    clean_topic = new_topic("dedup-clean", partitions=2)
    dup_topic = new_topic("dedup-dups", partitions=2)
    produce_readings(kafka_bootstrap, clean_topic, sensors=SENSORS, per_sensor=PER_SENSOR)
    produced = produce_readings(
        kafka_bootstrap,
        dup_topic,
        sensors=SENSORS,
        per_sensor=PER_SENSOR,
        duplicate_every=3,
        duplicate_delay=3,
    )
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
    for point, max_offsets in KILLS:
        run = run_job(
            "jobs.dedup_delta",
            [*args, "--max-offsets-per-trigger", str(max_offsets)],
            crash_at=point,
            timeout_s=600,
        )
        assert run.killed and run.fired(point.partition("@")[0], "kill"), (
            f"{point}: {run.output_tail}"
        )
    query, _ = start(spark, kafka_bootstrap, dup_topic, paths, max_offsets_per_trigger=70)
    await_done(query, 600)
    assert query.exception() is None

    crashed = spark.read.format("delta").load(str(paths.unique)).select(*VALUES)
    assert_df_equality(clean, crashed, ignore_row_order=True)
    # The exact catalog holds each kept id once; no staged file is left unreferenced.
    catalog = spark.read.format("delta").load(str(paths.catalog))
    assert catalog.count() == catalog.select("record_id").distinct().count() == SENSORS * PER_SENSOR
    from deltalake import DeltaTable

    referenced = {p.rsplit("/", 1)[-1] for p in DeltaTable(str(paths.unique)).file_uris()}
    on_disk = {p.name for p in paths.unique.glob("*.parquet")}
    assert on_disk == referenced
    assert not paths.quarantine.exists()
