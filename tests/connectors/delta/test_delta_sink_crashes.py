"""Delta sinks killed (SIGKILL) at every numbered step of their protocol, and at random times.

Each test chains the kills in one sequence of job runs: run 1 dies at step 1 of batch 0, the
restart dies at the next point, ..., the last run finishes. The table must then equal the
rows a run that never crashed writes (computed once, in-process): none lost, none twice.
The two-phase tests' job sequences, each on its own table, run two at a time
(:func:`tests.conftest.start_selected`).
"""

from __future__ import annotations

import os
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path

import pytest
from chispa import assert_df_equality
from deltalake import DeltaTable
from deltalake.exceptions import DeltaError, TableNotFoundError
from test_delta_sinks import data_commits

from connectors import kafka
from connectors.delta.two_phase import DeltaCommitter
from jobs.exactly_once_delta import parse_events
from spark_ext.jobrun import JobRun, run_job
from spark_ext.recovery.kills import (
    JOB_TIMEOUT_S,
    batches_for,
    kill_at_each_point,
    kill_at_random_times,
)
from spark_ext.sinks.protocol import DELTA_IDEMPOTENT, DELTA_TWO_PHASE
from tests.conftest import start_selected
from tests.connectors.conftest import EVENTS, MAX_OFFSETS, RANDOM_KILLS

pytestmark = [pytest.mark.integration, pytest.mark.crash]

JOB = "jobs.exactly_once_delta"


def job_args(topic, tmp_path, mode, max_offsets=MAX_OFFSETS):
    return [
        "--profile", "test", "--topic", topic, "--mode", mode, "--sink-id", "events",
        "--table", str(tmp_path / "table"), "--checkpoint", str(tmp_path / "chk"),
        "--max-offsets-per-trigger", str(max_offsets),
    ]  # fmt: skip


@pytest.fixture(scope="module")
def expected(spark, kafka_bootstrap, events_topic):
    """What a run that never crashed writes: every record of the topic, parsed, once."""
    return parse_events(kafka.read_batch(spark, kafka_bootstrap, events_topic)).cache()


def assert_table_is_exactly(spark, table, expected):
    got = spark.read.format("delta").load(str(table))
    assert_df_equality(got, expected, ignore_row_order=True, ignore_nullable=True)


def assert_no_staged_leftovers(table):
    """Every file the two-phase sink staged is referenced by the table (orphans removed)."""
    on_disk = sorted(n for n, _ in DeltaCommitter(str(table), "events").staged_files())
    referenced = sorted(os.path.basename(u) for u in DeltaTable(str(table)).file_uris())
    assert on_disk == referenced


TWO_PHASE_POINTS = [
    f"{DELTA_TWO_PHASE.point(1)}@0",  # staged, nothing committed
    f"{DELTA_TWO_PHASE.point(2)}@0",  # all staged, before the commit
    f"{DELTA_TWO_PHASE.point(3)}@1",  # Delta commit landed, Spark's commit log did not
    f"{DELTA_TWO_PHASE.point(4)}@2",  # cleaned, Spark's commit log did not
]


@dataclass(frozen=True)
class RaisedAfterCommit:
    failed: JobRun
    txn_after_failed: int | None
    files_after_failed: list[str]
    final: JobRun


@pytest.fixture(scope="module")
def job_runs(request, events_topic, tmp_path_factory) -> dict[str, Future]:
    """The job processes of the two-phase tests, each on its own table, two at a time."""
    every_step = tmp_path_factory.mktemp("every-step")
    raising = tmp_path_factory.mktemp("raise-after-commit")

    def kill_at_every_step() -> Path:
        kill_at_each_point(JOB, job_args(events_topic, every_step, "two_phase"), TWO_PHASE_POINTS)
        return every_step

    def raise_after_commit() -> tuple[Path, RaisedAfterCommit]:
        # Batch 1's Delta commit lands, then the driver's commit raises: Spark calls abort.
        args = job_args(events_topic, raising, "two_phase")
        point = DELTA_TWO_PHASE.point(3)
        failed = run_job(JOB, args, fault=f"{point}@1:raise", timeout_s=JOB_TIMEOUT_S)
        table = DeltaTable(str(raising / "table"))
        txn, files = table.transaction_version("events"), table.file_uris()
        final = run_job(JOB, args, timeout_s=JOB_TIMEOUT_S)  # replays batch 1: skipped
        return raising, RaisedAfterCommit(failed, txn, files, final)

    return start_selected(
        request,
        {
            "test_two_phase_delta_sink_killed_at_every_step_writes_each_row_once": (
                kill_at_every_step
            ),
            "test_two_phase_delta_sink_raising_after_its_durable_commit_loses_no_batch": (
                raise_after_commit
            ),
        },
    )


def test_two_phase_delta_sink_killed_at_every_step_writes_each_row_once(spark, job_runs, expected):
    root = job_runs["test_two_phase_delta_sink_killed_at_every_step_writes_each_row_once"].result()

    assert_table_is_exactly(spark, root / "table", expected)
    table = DeltaTable(str(root / "table"))
    assert table.transaction_version("events") == EVENTS // MAX_OFFSETS - 1
    # one commit per batch, each once (the other commits: create, one run epoch per start)
    assert data_commits(table) == list(range(EVENTS // MAX_OFFSETS))
    assert_no_staged_leftovers(root / "table")


def test_two_phase_delta_sink_raising_after_its_durable_commit_loses_no_batch(
    spark, job_runs, expected
):
    name = "test_two_phase_delta_sink_raising_after_its_durable_commit_loses_no_batch"
    root, runs = job_runs[name].result()
    point = DELTA_TWO_PHASE.point(3)
    assert runs.failed.fired(point, "raise") and not runs.failed.ok, runs.failed.output_tail
    assert runs.txn_after_failed == 1
    assert all(os.path.exists(u) for u in runs.files_after_failed), "abort deleted committed files"

    assert runs.final.ok, runs.final.output_tail
    assert_table_is_exactly(spark, root / "table", expected)
    from_rs = spark.createDataFrame(DeltaTable(str(root / "table")).to_pandas(), expected.schema)
    assert_df_equality(from_rs, expected, ignore_row_order=True, ignore_nullable=True)
    assert data_commits(DeltaTable(str(root / "table"))) == list(range(EVENTS // MAX_OFFSETS))
    assert_no_staged_leftovers(root / "table")


@pytest.mark.heavy
@pytest.mark.every_mode
def test_idempotent_delta_sink_killed_at_every_step_writes_each_row_once(
    spark, events_topic, expected, tmp_path
):
    points = [
        f"{DELTA_IDEMPOTENT.point(1)}@0",  # batch known, nothing written
        f"{DELTA_IDEMPOTENT.point(3)}@1",  # Delta commit with txn landed, Spark's did not
    ]
    kill_at_each_point(JOB, job_args(events_topic, tmp_path, "idempotent"), points)

    assert_table_is_exactly(spark, tmp_path / "table", expected)
    assert DeltaTable(str(tmp_path / "table")).transaction_version("events") == 2


@pytest.mark.heavy
def test_two_phase_delta_sink_killed_at_random_times_writes_each_row_once(
    spark, events_topic, expected, tmp_path
):
    table = str(tmp_path / "table")

    def recorded() -> int:
        try:
            version = DeltaTable(table).transaction_version("events")
        except (TableNotFoundError, DeltaError):  # not created yet
            return -1
        return -1 if version is None else version

    args = job_args(events_topic, tmp_path, "two_phase", batches_for(RANDOM_KILLS, EVENTS))
    runs = kill_at_random_times(JOB, args, RANDOM_KILLS, seed=3, progress=recorded, max_delay_s=1.0)

    assert sum(r.killed for r in runs) == RANDOM_KILLS
    assert_table_is_exactly(spark, tmp_path / "table", expected)
    assert_no_staged_leftovers(tmp_path / "table")
