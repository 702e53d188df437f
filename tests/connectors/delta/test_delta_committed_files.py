"""The two-phase Delta sink never deletes a file a snapshot references, and never guesses.

Driven through the committer on the driver side, the way Spark drives it (``commit``; on any
exception ``abort``), against real delta-rs tables; every table is read back with delta-rs and
with Spark's Delta reader. No Spark query runs here: staging is the task-side function itself.
"""

from __future__ import annotations

import os
import time

import pyarrow as pa
import pytest
from deltalake import DeltaTable
from pyspark.sql.types import LongType, StringType, StructField, StructType

from connectors.delta.staging import StagedFile, stage_batches, staged_name
from connectors.delta.table import ensure_table
from connectors.delta.two_phase import DeltaCommitter
from spark_ext.crash import FAULT_ENV
from spark_ext.sinks.errors import (
    BatchRegressionError,
    DeltaTxnExpiredError,
    DriverFencedError,
    NotAStreamTaskError,
)
from spark_ext.sinks.protocol import DELTA_TWO_PHASE, Outcome, abort_batch, commit_batch
from spark_ext.sinks.task import current_batch_id
from spark_ext.storage import StorageSettings

SCHEMA = StructType([StructField("id", StringType()), StructField("n", LongType())])
SINK = "s"


def stage(
    table: str,
    batch_id: int,
    ids: list[str],
    partitions: int = 2,
    settings: StorageSettings | None = None,
) -> list[StagedFile]:
    """What ``partitions`` tasks of ``batch_id`` stage for ``ids`` (split round-robin; a table
    on object storage: ``settings``)."""
    out = []
    for p in range(partitions):
        part = ids[p::partitions]
        rb = pa.record_batch(
            [pa.array(part, pa.string()), pa.array(range(len(part)), pa.int64())],
            names=["id", "n"],
        )
        out.append(stage_batches([rb], table, SINK, SCHEMA, batch_id, p, 0, None, settings))
    return out


def spark_commit(committer: DeltaCommitter, batch_id: int, messages: list[StagedFile]) -> Outcome:
    """What Spark does with a stream writer: ``commit``, and ``abort`` if ``commit`` raised."""
    try:
        return commit_batch(committer, batch_id, messages)
    except Exception:
        abort_batch(committer, batch_id, messages)
        raise


def ids_in(spark, table: str, version: int | None = None) -> tuple[list[str], list[str]]:
    """The ids in the table read by delta-rs and by Spark's Delta reader (sorted)."""
    dt = DeltaTable(table, version=version) if version is not None else DeltaTable(table)
    rs = sorted(dt.to_pyarrow_table()["id"].to_pylist())
    reader = spark.read.format("delta")
    if version is not None:
        reader = reader.option("versionAsOf", version)
    sp = sorted(r.id for r in reader.load(table).collect())
    return rs, sp


def assert_reads_back(spark, table: str, expected: list[str]) -> None:
    dt = DeltaTable(table)
    missing = [u for u in dt.file_uris() if not os.path.exists(u)]
    assert not missing, f"the table references deleted files: {missing}"
    assert ids_in(spark, table) == (sorted(expected), sorted(expected))


def assert_no_staged_leftovers(table: str) -> None:
    on_disk = sorted(n for n, _ in DeltaCommitter(table, SINK).staged_files())
    referenced = sorted(os.path.basename(u) for u in DeltaTable(table).file_uris())
    assert on_disk == referenced


@pytest.fixture
def table(tmp_path) -> str:
    path = str(tmp_path / "t")
    ensure_table(path, SCHEMA)
    return path


BATCH0 = [f"a{i}" for i in range(6)]
BATCH1 = [f"b{i}" for i in range(6)]


# -- D1: an exception after the commit became durable ----------------------------------
def test_commit_whose_post_commit_hook_failed_keeps_its_files_and_replay_is_skipped(
    spark, tmp_path
):
    path = str(tmp_path / "t")
    DeltaTable.create(
        path,
        schema=pa.schema([("id", pa.string()), ("n", pa.int64())]),
        configuration={"delta.checkpointInterval": "2"},
    )
    # The checkpoint delta-rs writes after version 1 lands cannot be written: a real
    # post-commit hook failure, after the commit of batch 0 is durable.
    blocker = os.path.join(path, "_delta_log", f"{1:020d}.checkpoint.parquet")
    os.makedirs(blocker)
    committer = DeltaCommitter(path, SINK)
    try:
        spark_commit(committer, 0, stage(path, 0, BATCH0))
    except Exception:
        pass  # either outcome is allowed; what the table holds is what is checked
    os.rmdir(blocker)
    assert DeltaTable(path).transaction_version(SINK) == 0
    assert_reads_back(spark, path, BATCH0)

    # Spark replays batch 0 (its commit log never got the entry): skipped, nothing lost.
    assert spark_commit(committer, 0, stage(path, 0, BATCH0)) is Outcome.SKIPPED_REPLAY
    assert_reads_back(spark, path, BATCH0)
    assert_no_staged_leftovers(path)


def test_abort_after_an_injected_fault_at_the_durable_commit_deletes_no_committed_file(
    spark, table, monkeypatch
):
    committer = DeltaCommitter(table, SINK)
    spark_commit(committer, 0, stage(table, 0, BATCH0))
    monkeypatch.setenv(FAULT_ENV, f"{DELTA_TWO_PHASE.point(3)}@1:raise")
    with pytest.raises(Exception, match="injected fault"):
        spark_commit(committer, 1, stage(table, 1, BATCH1))
    monkeypatch.delenv(FAULT_ENV)
    assert_reads_back(spark, table, BATCH0 + BATCH1)

    assert spark_commit(committer, 1, stage(table, 1, BATCH1)) is Outcome.SKIPPED_REPLAY
    assert_reads_back(spark, table, BATCH0 + BATCH1)
    assert_no_staged_leftovers(table)


# -- D2: the txn expired (delta.setTransactionRetentionDuration) -------------------------
def test_expired_txn_next_to_committed_files_is_a_typed_error_and_nothing_is_deleted(
    spark, tmp_path
):
    path = str(tmp_path / "t")
    DeltaTable.create(
        path,
        schema=pa.schema([("id", pa.string()), ("n", pa.int64())]),
        configuration={"delta.setTransactionRetentionDuration": "interval 1 second"},
    )
    committer = DeltaCommitter(path, SINK)
    spark_commit(committer, 0, stage(path, 0, BATCH0))
    spark_commit(committer, 1, stage(path, 1, BATCH1))
    time.sleep(2.5)
    assert DeltaTable(path).transaction_version(SINK) is None  # what delta-rs reads now

    with pytest.raises(DeltaTxnExpiredError):
        DeltaCommitter(path, SINK).recover()
    assert_reads_back(spark, path, BATCH0 + BATCH1)
    # A pending replay of batch 1 is refused too, not committed a second time.
    with pytest.raises(DeltaTxnExpiredError):
        spark_commit(DeltaCommitter(path, SINK), 1, stage(path, 1, BATCH1))
    assert_reads_back(spark, path, BATCH0 + BATCH1)


# -- D4: an older driver still running when a new start recovers --------------------------
def test_older_driver_is_fenced_by_a_new_start_and_commits_nothing(spark, table):
    old = DeltaCommitter(table, SINK)
    old.recover(fence=True)
    messages = stage(table, 0, BATCH0)
    new = DeltaCommitter(table, SINK)
    real_table, calls = old._table, []

    def snapshot_then_a_new_start_recovers():
        snapshot = real_table()
        calls.append(1)
        if len(calls) == 2:  # the old driver read the snapshot it commits against
            new.recover(fence=True)
        return snapshot

    old._table = snapshot_then_a_new_start_recovers  # type: ignore[method-assign]
    with pytest.raises(DriverFencedError):
        spark_commit(old, 0, messages)
    assert DeltaTable(table).transaction_version(SINK) is None
    assert_reads_back(spark, table, [])

    # The new start commits the batch (Spark replays it from its checkpoint).
    assert spark_commit(new, 0, stage(table, 0, BATCH0)) is Outcome.COMMITTED
    assert_reads_back(spark, table, BATCH0)
    assert_no_staged_leftovers(table)


# -- X1 (two-phase) ---------------------------------------------------------------------
def test_two_phase_batch_below_the_recorded_one_raises_and_writes_nothing(spark, table):
    committer = DeltaCommitter(table, SINK)
    spark_commit(committer, 0, stage(table, 0, BATCH0))
    spark_commit(committer, 1, stage(table, 1, BATCH1))
    with pytest.raises(BatchRegressionError):
        spark_commit(committer, 0, stage(table, 0, ["zombie"]))
    assert_reads_back(spark, table, BATCH0 + BATCH1)
    assert_no_staged_leftovers(table)


# -- smaller holes ------------------------------------------------------------------------
def test_batch_id_outside_a_stream_task_is_a_not_a_stream_task_error():
    with pytest.raises(NotAStreamTaskError):
        current_batch_id()


def test_late_task_attempt_of_a_committed_batch_is_removed_at_start(spark, table):
    committer = DeltaCommitter(table, SINK)
    spark_commit(committer, 0, stage(table, 0, BATCH0))
    # A speculative/late attempt of partition 0 finishes after step 4 of batch 0 ran.
    late = staged_name(SINK, 0, 0, 1)
    with open(os.path.join(table, late), "wb") as f:
        f.write(b"PAR1 late")
    DeltaCommitter(table, SINK).recover()
    assert not os.path.exists(os.path.join(table, late))
    assert_reads_back(spark, table, BATCH0)
    assert_no_staged_leftovers(table)


def test_replay_after_optimize_keeps_the_tombstoned_files_time_travel_needs(spark, table):
    committer = DeltaCommitter(table, SINK)
    spark_commit(committer, 0, stage(table, 0, BATCH0))
    spark_commit(committer, 1, stage(table, 1, BATCH1))
    before = DeltaTable(table).version()
    DeltaTable(table).optimize.compact()  # tombstones the sink's files, adds one
    # Spark replays batch 1 (the commit log lost its entry): skipped, and its clean-up
    # must not delete batch 1's tombstoned files.
    assert spark_commit(committer, 1, stage(table, 1, BATCH1)) is Outcome.SKIPPED_REPLAY
    everything = sorted(BATCH0 + BATCH1)
    assert ids_in(spark, table, version=before) == (everything, everything)
    assert_reads_back(spark, table, everything)
