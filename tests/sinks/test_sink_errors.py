"""Typed failures of the sinks, and the Kafka pitfalls: lost commit answer, zombie, timeout,
empty batch. Driven through the committers directly (delta-rs, the real broker; no Spark)
except the schema checks, which start real queries."""

from __future__ import annotations

import os

import pyarrow as pa
import pyarrow.ipc as ipc
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable, write_deltalake
from pyspark.sql.types import StringType, StructField, StructType

from connectors import kafka
from connectors.delta.two_phase import DeltaCommitter, StagedFile, schema_shape, staged_name
from connectors.kafka.sink import KafkaCommitter, KafkaSinkSettings, SinkProgress, StagedRecords
from connectors.sinks import Trigger, exactly_once_to_delta
from spark_ext.sinks import (
    ConcurrentWriterError,
    SchemaMismatchError,
    TransactionTimeoutError,
    WriterFencedError,
)
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


# -- Kafka --------------------------------------------------------------------------------
def stage_kafka(folder, batch_id: int, values: list[str]) -> StagedRecords:
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, f"b{batch_id}.arrow")
    table = pa.table({"key": pa.array(values), "value": pa.array(values)})
    with pa.OSFile(path, "wb") as sink, ipc.new_file(sink, table.schema) as out:
        out.write_table(table)
    return StagedRecords(path, len(values), batch_id, 0)


def settings(bootstrap, topic, tmp_path, **kw) -> KafkaSinkSettings:
    return KafkaSinkSettings(bootstrap, topic, "k", str(tmp_path / "staging"), **kw)


def values(bootstrap, topic, read_committed=True):
    return sorted(v.decode() for _, _, _, v in kafka.consume_all(bootstrap, topic, read_committed))


def test_commit_whose_answer_was_lost_is_recognised_as_committed(
    kafka_bootstrap, new_topic, tmp_path
):
    from kafka.errors import KafkaTimeoutError

    topic = new_topic("lost", partitions=1)
    committer = KafkaCommitter(settings(kafka_bootstrap, topic, tmp_path))
    producer = committer.producer()
    real_commit = producer.commit_transaction

    def commit_then_lose_the_answer():
        real_commit()
        raise KafkaTimeoutError("answer lost")

    producer.commit_transaction = commit_then_lose_the_answer
    msg = stage_kafka(tmp_path / "s", 0, ["a", "b"])
    assert commit_batch(committer, 0, [msg]) is Outcome.COMMITTED
    committer.close()
    assert values(kafka_bootstrap, topic) == ["a", "b"]  # once, not retried
    assert SinkProgress(kafka_bootstrap, topic, "k").read().batch_id == 0


def test_restarted_driver_fences_its_zombie(kafka_bootstrap, new_topic, tmp_path):
    topic = new_topic("zombie", partitions=1)
    zombie = KafkaCommitter(settings(kafka_bootstrap, topic, tmp_path))
    zombie.producer()
    successor = KafkaCommitter(settings(kafka_bootstrap, topic, tmp_path))
    assert (
        commit_batch(successor, 0, [stage_kafka(tmp_path / "s", 0, ["new"])]) is Outcome.COMMITTED
    )
    with pytest.raises(WriterFencedError):
        zombie.commit_staged(1, [stage_kafka(tmp_path / "z", 1, ["zombie"])])
    successor.close()
    assert values(kafka_bootstrap, topic) == ["new"]


def test_transaction_timeout_above_the_broker_maximum_fails_at_start(
    kafka_bootstrap, new_topic, tmp_path
):
    topic = new_topic("timeout", partitions=1)
    committer = KafkaCommitter(
        settings(kafka_bootstrap, topic, tmp_path, transaction_timeout_ms=900_001)
    )
    with pytest.raises(TransactionTimeoutError) as err:
        committer.recover()
    assert err.value.setting == "transaction_timeout_ms"


def test_empty_batch_records_its_id_and_writes_nothing(kafka_bootstrap, new_topic, tmp_path):
    topic = new_topic("empty", partitions=1)
    committer = KafkaCommitter(settings(kafka_bootstrap, topic, tmp_path))
    assert commit_batch(committer, 0, [stage_kafka(tmp_path / "s", 0, [])]) is Outcome.COMMITTED
    assert commit_batch(committer, 0, []) is Outcome.SKIPPED_REPLAY
    committer.close()
    assert values(kafka_bootstrap, topic, read_committed=False) == []
    assert SinkProgress(kafka_bootstrap, topic, "k").read().batch_id == 0


def test_empty_delta_batch_records_its_txn_without_adding_files(delta_table):
    committer = DeltaCommitter(delta_table, "s")
    empty = StagedFile("", 0, 0, 0, 0, schema_shape(SCHEMA.json()))
    assert commit_batch(committer, 0, [empty]) is Outcome.COMMITTED
    table = DeltaTable(delta_table)
    assert table.transaction_version("s") == 0
    assert table.file_uris() == []
