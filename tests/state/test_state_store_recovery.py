"""Every state store profile restarts from its checkpoint after SIGKILL with identical state.

One job process runs the count-per-key query once per store profile (hdfs, rocksdb,
rocksdb_changelog), each on its own checkpoint; it is SIGKILLed once every query has
committed batch ``CRASH_BATCH`` and restarted until ``FINAL_BATCH``. The state that Spark's
state reader returns from each checkpoint must equal, row for row, the state of a run of the
same query that never crashed, and the closed-form counts of the input.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager as ContextManager
from pathlib import Path

import pytest
from chispa import assert_df_equality
from pyspark.sql import DataFrame, SparkSession

from scripts.benchmarks.state_store import (
    CRASH_POINT,
    JOB_MODULE,
    read_events,
    run_queries,
)
from spark_ext.config import STATE_STORES
from spark_ext.jobrun import run_job
from spark_ext.state_inspect import StateInspector

pytestmark = [pytest.mark.integration, pytest.mark.crash]

STORES = sorted(STATE_STORES)
KEYS = 300  # the fill batch 0 holds every key once
ROWS_PER_BATCH = 100  # later batches update a rolling window of 100 keys
CRASH_BATCH = 2
FINAL_BATCH = 6


def job_args(root: Path, until_batch: int, events: Path) -> list[str]:
    stores = [arg for store in STORES for arg in ("--store", store)]
    return [
        *stores,
        "--checkpoint-root", str(root),
        "--keys", str(KEYS),
        "--rows-per-batch", str(ROWS_PER_BATCH),
        "--until-batch", str(until_batch),
        "--events", str(events),
        "--profile", "test",
    ]  # fmt: skip


def expected_state(spark: SparkSession, batch_id: int) -> DataFrame:
    """Count and sum per key of the values ``0 .. KEYS + batch_id * ROWS_PER_BATCH - 1``."""
    end = KEYS + batch_id * ROWS_PER_BATCH
    counts: dict[int, list[int]] = {}
    for value in range(end):
        entry = counts.setdefault(value % KEYS, [0, 0])
        entry[0] += 1
        entry[1] += value
    rows = [(key, n, total) for key, (n, total) in sorted(counts.items())]
    return spark.createDataFrame(rows, "key long, n long, total long")


def flat(state: DataFrame) -> DataFrame:
    return state.selectExpr("key.key AS key", "value.count AS n", "value.sum AS total")


@pytest.fixture(scope="module")
def crashed_and_restarted(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Checkpoints of the job killed after batch CRASH_BATCH, then restarted to FINAL_BATCH."""
    root = tmp_path_factory.mktemp("crashed")
    crashed = run_job(
        JOB_MODULE,
        job_args(root, until_batch=10_000, events=root / "crashed.jsonl"),
        crash_at=f"{CRASH_POINT}@{CRASH_BATCH}",
        timeout_s=600,
    )
    assert crashed.killed, crashed.output_tail
    for store in STORES:  # killed mid-stream: nothing reached the final batch
        commits = [int(p.name) for p in (root / store / "commits").iterdir() if p.name.isdigit()]
        assert CRASH_BATCH <= max(commits) < FINAL_BATCH, (store, commits)
    restarted = run_job(
        JOB_MODULE,
        job_args(root, until_batch=FINAL_BATCH, events=root / "restarted.jsonl"),
        timeout_s=600,
    )
    assert restarted.ok, restarted.output_tail
    return root


@pytest.fixture(scope="module")
def never_crashed(
    tmp_path_factory: pytest.TempPathFactory,
    spark: SparkSession,
    state_store_conf_restored: Callable[[], ContextManager[SparkSession]],
) -> Path:
    """Checkpoints of the same query run in-process to FINAL_BATCH without a crash."""
    root = tmp_path_factory.mktemp("never_crashed")
    with state_store_conf_restored():
        run_queries(spark, STORES, root, KEYS, ROWS_PER_BATCH, FINAL_BATCH, timeout_s=600)
    return root


def test_restart_resumes_from_the_checkpoint_instead_of_starting_over(
    crashed_and_restarted: Path,
) -> None:
    events = read_events(crashed_and_restarted / "restarted.jsonl")
    first_batches: dict[str, int] = {}
    for e in events:
        if e["event"] == "batch":
            first_batches.setdefault(e["query"], e["batch"])
    assert set(first_batches) == {f"state_{s}" for s in STORES}
    # no fill batch again: the restarted job took batch ids (and state) from the checkpoint
    assert all(batch > CRASH_BATCH for batch in first_batches.values()), first_batches


@pytest.mark.parametrize("store", STORES)
def test_store_profile_resumes_with_identical_state_after_sigkill(
    spark: SparkSession, crashed_and_restarted: Path, never_crashed: Path, store: str
) -> None:
    crashed = StateInspector(spark, crashed_and_restarted / store)
    clean = StateInspector(spark, never_crashed / store)
    for batch in (CRASH_BATCH, FINAL_BATCH):
        assert_df_equality(
            crashed.read(batch_id=batch),
            clean.read(batch_id=batch),
            ignore_row_order=True,
            ignore_nullable=True,
        )
    assert_df_equality(
        flat(crashed.read(batch_id=FINAL_BATCH)),
        expected_state(spark, FINAL_BATCH),
        ignore_row_order=True,
        ignore_nullable=True,
    )
