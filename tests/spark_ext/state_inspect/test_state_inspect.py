"""State inspection on real checkpoints: rows and bytes per operator partition, CLI, errors."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from spark_ext.state_inspect import (
    CheckpointNotFound,
    StateInspector,
    StateOperatorNotFound,
    main,
)
from tests.conftest import await_done

pytestmark = pytest.mark.integration


def disk_bytes(folder: Path) -> int:
    return sum(os.path.getsize(os.path.join(r, f)) for r, _, fs in os.walk(folder) for f in fs)


@pytest.mark.parametrize("store", ["hdfs", "rocksdb", "rocksdb_changelog"])
def test_report_counts_state_rows_and_bytes_per_partition(
    spark: SparkSession, never_crashed: Path, shape, store: str
) -> None:
    checkpoint = never_crashed / store
    report = StateInspector(spark, checkpoint).report()

    assert report.batch_id >= shape.final_batch
    [operator] = report.operators
    assert (operator.operator_id, operator.operator_name) == (0, "stateStoreSave")
    assert operator.num_partitions == 2
    assert [p.partition_id for p in report.partitions] == [0, 1]
    assert report.rows() == shape.keys  # every key once, split over the partitions
    assert all(0 < p.rows < shape.keys for p in report.partitions)
    for p in report.partitions:
        assert p.bytes_on_disk == disk_bytes(checkpoint / "state" / "0" / str(p.partition_id))
        assert p.bytes_on_disk > 0


def test_report_of_an_earlier_batch_reads_that_version(
    spark: SparkSession, never_crashed: Path, shape
) -> None:
    inspector = StateInspector(spark, never_crashed / "rocksdb_changelog")
    first = inspector.report(batch_id=0)
    assert first.batch_id == 0
    assert first.rows() == shape.keys
    totals = inspector.read(batch_id=0).selectExpr("sum(value.count) AS n").first()
    assert totals is not None and totals["n"] == shape.keys  # after the fill batch: 1 per key


def test_cli_prints_the_report_as_json(
    never_crashed: Path, shape, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main([str(never_crashed / "hdfs"), "--json", "--profile", "test"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["rows"] == shape.keys
    assert [p["partition_id"] for p in report["partitions"]] == [0, 1]


def test_folder_without_commits_raises_checkpoint_not_found(
    spark: SparkSession, tmp_path: Path
) -> None:
    with pytest.raises(CheckpointNotFound):
        StateInspector(spark, tmp_path / "nothing").report()


def test_stateless_query_raises_state_operator_not_found(
    spark: SparkSession, tmp_path: Path
) -> None:
    checkpoint = tmp_path / "stateless"
    query = (
        spark.readStream.format("rate-micro-batch")
        .option("rowsPerBatch", 10)
        .load()
        .writeStream.format("noop")
        .option("checkpointLocation", str(checkpoint))
        .trigger(once=True)
        .start()
    )
    await_done(query, 300)
    with pytest.raises(StateOperatorNotFound):
        StateInspector(spark, checkpoint).report()


def test_report_sums_every_state_variable_of_a_transform_with_state_operator(
    spark: SparkSession, tmp_path: Path
) -> None:
    import pandas as pd
    from pyspark.sql.streaming.stateful_processor import StatefulProcessor
    from pyspark.sql.types import LongType, StructField, StructType

    class CountAndKeep(StatefulProcessor):
        def init(self, handle) -> None:
            self.count = handle.getValueState("count", StructType([StructField("n", LongType())]))
            self.seen = handle.getListState("seen", StructType([StructField("v", LongType())]))

        def handleInputRows(self, key, rows, timerValues):
            n = self.count.get()[0] if self.count.exists() else 0
            for frame in rows:
                n += len(frame)
                self.seen.appendList([(int(v),) for v in frame["value"]])
            self.count.update((n,))
            yield pd.DataFrame({"key": [key[0]], "n": [n]})

        def close(self) -> None:
            pass

    checkpoint = tmp_path / "tws"
    query = (
        spark.readStream.format("rate-micro-batch")
        .option("rowsPerBatch", 20)
        .load()
        .selectExpr("value % 5 AS key", "value")
        .groupBy("key")
        .transformWithStateInPandas(CountAndKeep(), "key long, n long", "Update", "None")
        .writeStream.format("noop")
        .outputMode("update")
        .option("checkpointLocation", str(checkpoint))
        .trigger(once=True)
        .start()
    )
    await_done(query, 300)

    inspector = StateInspector(spark, checkpoint)
    [operator] = inspector.operators()
    assert operator.state_variables == ("count", "seen")
    assert inspector.report().rows() == 5 + 20  # a count per key + every kept value
    assert inspector.read(state_variable="count").count() == 5
