"""Every state store profile restarts from its checkpoint after SIGKILL with identical state.

One job process runs the count-per-key query once per store profile (hdfs, rocksdb,
rocksdb_changelog), each on its own checkpoint; it is SIGKILLed once every query has
committed batch ``CRASH_BATCH`` and restarted until the final batch. The state that Spark's
state reader returns from each checkpoint must equal, row for row, the state of a run of the
same query that never crashed, and the closed-form counts of the input.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from chispa import assert_df_equality
from pyspark.sql import DataFrame, SparkSession

from scripts.benchmarks.state_store import CRASH_POINT, JOB_MODULE, read_events
from spark_ext.config import STATE_STORES
from spark_ext.jobrun import run_job
from spark_ext.state_inspect import StateInspector

pytestmark = [pytest.mark.integration, pytest.mark.crash]

CRASH_BATCH = 2
#: File kinds each store profile leaves in a state partition folder, and kinds it never
#: writes (proves which store, and whether the changelog, really ran).
STORE_FILES = {
    "hdfs": (".delta", {".zip", ".changelog"}),
    "rocksdb": (".zip", {".delta", ".changelog"}),
    "rocksdb_changelog": (".changelog", {".delta"}),
}


def job_args(shape, root: Path, until_batch: int, events: Path) -> list[str]:
    stores = [arg for store in shape.stores for arg in ("--store", store)]
    return [
        *stores,
        "--checkpoint-root", str(root),
        "--keys", str(shape.keys),
        "--rows-per-batch", str(shape.rows_per_batch),
        "--until-batch", str(until_batch),
        "--events", str(events),
        "--profile", "test",
        "--conf", shape.retain,
        "--interval", shape.interval,
    ]  # fmt: skip


def expected_state(spark: SparkSession, shape, batch_id: int) -> DataFrame:
    """Count and sum per key of the values ``0 .. keys + batch_id * rows_per_batch - 1``."""
    counts: dict[int, list[int]] = {}
    for value in range(shape.keys + batch_id * shape.rows_per_batch):
        entry = counts.setdefault(value % shape.keys, [0, 0])
        entry[0] += 1
        entry[1] += value
    rows = [(key, n, total) for key, (n, total) in sorted(counts.items())]
    return spark.createDataFrame(rows, "key long, n long, total long")


def flat(state: DataFrame) -> DataFrame:
    return state.selectExpr("key.key AS key", "value.count AS n", "value.sum AS total")


@pytest.fixture(scope="module")
def crashed_and_restarted(tmp_path_factory: pytest.TempPathFactory, shape) -> Path:
    """Checkpoints of the job killed after batch CRASH_BATCH, then restarted to the final batch."""
    root = tmp_path_factory.mktemp("crashed")
    crashed = run_job(
        JOB_MODULE,
        job_args(shape, root, until_batch=10_000, events=root / "crashed.jsonl"),
        fault=f"{CRASH_POINT}@{CRASH_BATCH}",
        timeout_s=600,
    )
    assert crashed.killed and crashed.fired(CRASH_POINT, "kill"), crashed.output_tail
    for store in shape.stores:  # killed mid-stream: no store reached the final batch
        commits = [int(p.name) for p in (root / store / "commits").iterdir() if p.name.isdigit()]
        assert CRASH_BATCH <= max(commits) < shape.final_batch, (store, commits)
    restarted = run_job(
        JOB_MODULE,
        job_args(shape, root, until_batch=shape.final_batch, events=root / "restarted.jsonl"),
        timeout_s=600,
    )
    assert restarted.ok, restarted.output_tail
    return root


def test_restart_resumes_from_the_checkpoint_instead_of_starting_over(
    crashed_and_restarted: Path, shape
) -> None:
    events = read_events(crashed_and_restarted / "restarted.jsonl")
    first_batches: dict[str, int] = {}
    for e in events:
        if e["event"] == "batch":
            first_batches.setdefault(e["query"], e["batch"])
    assert set(first_batches) == {f"state_{s}" for s in shape.stores}
    # no fill batch again: the restarted job took batch ids (and state) from the checkpoint
    assert all(batch > CRASH_BATCH for batch in first_batches.values()), first_batches


@pytest.mark.parametrize("store", sorted(STATE_STORES))
def test_store_profile_resumes_with_identical_state_after_sigkill(
    spark: SparkSession, crashed_and_restarted: Path, never_crashed: Path, shape, store: str
) -> None:
    for root in (crashed_and_restarted, never_crashed):
        suffixes = {p.suffix for p in (root / store / "state" / "0" / "0").iterdir()}
        present, absent = STORE_FILES[store]
        assert present in suffixes and not absent & suffixes, (store, suffixes)
    crashed = StateInspector(spark, crashed_and_restarted / store)
    clean = StateInspector(spark, never_crashed / store)
    for batch in (CRASH_BATCH, shape.final_batch):
        assert_df_equality(
            crashed.read(batch_id=batch),
            clean.read(batch_id=batch),
            ignore_row_order=True,
            ignore_nullable=True,
        )
    assert_df_equality(
        flat(crashed.read(batch_id=shape.final_batch)),
        expected_state(spark, shape, shape.final_batch),
        ignore_row_order=True,
        ignore_nullable=True,
    )
