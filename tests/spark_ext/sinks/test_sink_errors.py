"""Typed failures of the Delta sinks: a concurrent writer, orphaned staging, a schema mismatch,
an empty batch. Driven through the committer directly (delta-rs; no Spark) except the schema
checks, which start real queries."""

from __future__ import annotations

import os

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable, write_deltalake
from pyspark.sql.types import StringType, StructField, StructType

from connectors.delta.staging import StagedFile, staged_name
from connectors.delta.table import schema_shape
from connectors.delta.two_phase import DeltaCommitter
from connectors.sinks import Trigger, exactly_once_to_delta
from spark_ext.sinks import ConcurrentWriterError, SchemaMismatchError
from spark_ext.sinks.protocol import Outcome, commit_batch

SCHEMA = StructType([StructField("id", StringType())])


# -- Delta --------------------------------------------------------------------------------
def stage_delta(table: str, sink_id: str, batch_id: int, ids: list[str]) -> StagedFile:
    name = staged_name(sink_id, batch_id, 0, 0)
    pq.write_table(pa.table({"id": pa.array(ids, pa.string())}), os.path.join(table, name))
    size = os.path.getsize(os.path.join(table, name))
    return StagedFile(name, size, len(ids), batch_id, 0, schema_shape(SCHEMA.json()))


@pytest.fixture
def delta_table(tmp_path) -> str:
    path = str(tmp_path / "t")
    DeltaTable.create(path, schema=pa.schema([("id", pa.string())]))
    return path


def test_concurrent_writer_with_the_same_sink_id_is_a_typed_error(delta_table):
    ours = DeltaCommitter(delta_table, "s")
    stale = DeltaTable(delta_table)  # the snapshot our step 2 read
    # Another writer with the same sink id commits batch 0 after our step 2, before our step 3.
    other = DeltaCommitter(delta_table, "s")
    commit_batch(other, 0, [stage_delta(delta_table, "s", 0, ["a"])])
    calls = iter([stale, DeltaTable(delta_table)])
    ours._table = lambda: next(calls)  # type: ignore[method-assign]

    with pytest.raises(ConcurrentWriterError):
        ours.commit_staged(0, [stage_delta(delta_table, "s", 0, ["a"])])
    assert DeltaTable(delta_table).to_pyarrow_table().num_rows == 1


def test_unrelated_concurrent_append_is_retried_and_the_batch_committed(delta_table):
    ours = DeltaCommitter(delta_table, "s")
    stale = DeltaTable(delta_table)
    write_deltalake(delta_table, pa.table({"id": ["other"]}), mode="append")  # someone else
    calls = iter([stale, DeltaTable(delta_table)])
    ours._table = lambda: next(calls)  # type: ignore[method-assign]

    ours.commit_staged(0, [stage_delta(delta_table, "s", 0, ["a", "b"])])
    table = DeltaTable(delta_table)
    assert sorted(table.to_pyarrow_table()["id"].to_pylist()) == ["a", "b", "other"]
    assert table.transaction_version("s") == 0


def test_orphaned_staged_files_are_removed_at_start(delta_table):
    committer = DeltaCommitter(delta_table, "s")
    commit_batch(committer, 0, [stage_delta(delta_table, "s", 0, ["a"])])
    orphan = stage_delta(delta_table, "s", 1, ["b"])  # staged by a driver killed before commit
    committer.recover()
    assert not os.path.exists(os.path.join(delta_table, orphan.path))
    assert len(committer.staged_files()) == 1  # the committed file stays


@pytest.mark.integration
@pytest.mark.parametrize("mode", ["two_phase", "idempotent"])
def test_schema_mismatch_fails_before_any_commit(spark, kafka_bootstrap, new_topic, tmp_path, mode):
    from jobs.exactly_once_delta import events_stream

    table = str(tmp_path / "t")
    write_deltalake(table, pa.table({"event_id": [1]}))  # event_id is a long here
    df = events_stream(spark, kafka_bootstrap, new_topic("schema"), None)
    with pytest.raises(SchemaMismatchError):
        exactly_once_to_delta(
            df, table, sink_id="s", checkpoint=str(tmp_path / "chk"), mode=mode,
            trigger=Trigger(available_now=True),
        )  # fmt: skip
    assert DeltaTable(table).version() == 0


def test_empty_delta_batch_records_its_txn_without_adding_files(delta_table):
    committer = DeltaCommitter(delta_table, "s")
    empty = StagedFile("", 0, 0, 0, 0, schema_shape(SCHEMA.json()))
    assert commit_batch(committer, 0, [empty]) is Outcome.COMMITTED
    table = DeltaTable(delta_table)
    assert table.transaction_version("s") == 0
    assert table.file_uris() == []
