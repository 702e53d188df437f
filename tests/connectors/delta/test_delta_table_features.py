"""Tables the two-phase Delta sink cannot write correctly are refused at start, by name; the
idempotent sink (Spark's Delta writer) and a batch-order regression in it, on real tables."""

from __future__ import annotations

import os

import pytest
from deltalake import DeltaTable
from pyspark.errors import StreamingQueryException
from pyspark.sql import functions as F

from connectors.delta.idempotent import DeltaIdempotentWriter
from connectors.delta.two_phase import FORMAT, DeltaTwoPhaseDataSource
from connectors.sinks import Trigger, exactly_once_to_delta
from spark_ext.sinks.errors import BatchRegressionError, UnsupportedTableFeatureError
from spark_ext.sinks.owner import SinkOwner
from tests.conftest import await_done

pytestmark = pytest.mark.integration

#: (feature named by the error, DDL of a table with it; ``{t}`` is the table).
TABLES = {
    "partitioned table": "CREATE TABLE {t} (id STRING, n BIGINT) USING delta PARTITIONED BY (n)",
    "NOT NULL column": "CREATE TABLE {t} (id STRING NOT NULL, n BIGINT) USING delta",
    "CHECK constraints": "CREATE TABLE {t} (id STRING, n BIGINT) USING delta;"
    "ALTER TABLE {t} ADD CONSTRAINT positive CHECK (n >= 0)",
    "generated column": "CREATE TABLE {t} (id STRING, n BIGINT GENERATED ALWAYS AS (CAST(length(id) AS BIGINT))) "
    "USING delta",
    "column mapping": "CREATE TABLE {t} (id STRING, n BIGINT) USING delta "
    "TBLPROPERTIES ('delta.columnMapping.mode' = 'name', 'delta.minReaderVersion' = '2', "
    "'delta.minWriterVersion' = '5')",
}


def rows(spark):
    """A stream of (id string, n bigint) whose id may be null (as parsed input is)."""
    rate = spark.readStream.format("rate").option("rowsPerSecond", 1).load()
    return rate.select(
        F.when(F.col("value") >= 0, F.col("value").cast("string")).alias("id"),
        F.col("value").alias("n"),
    )


@pytest.mark.parametrize("feature", sorted(TABLES))
def test_two_phase_sink_refuses_a_table_feature_it_cannot_write(spark, tmp_path, feature):
    table = str(tmp_path / "t")
    for statement in TABLES[feature].split(";"):
        spark.sql(statement.format(t=f"delta.`{table}`"))
    version = DeltaTable(table).version()
    query = None
    try:
        with pytest.raises(UnsupportedTableFeatureError) as err:
            query = exactly_once_to_delta(
                rows(spark), table, sink_id="s", checkpoint=str(tmp_path / "chk"),
                trigger=Trigger(available_now=True),
            )  # fmt: skip
    finally:
        if query is not None:
            query.stop()
    assert err.value.feature == feature
    assert DeltaTable(table).version() == version  # nothing written, not even a run epoch


def test_two_phase_sink_writes_a_not_null_column_the_rows_cannot_break(spark, tmp_path):
    table = str(tmp_path / "t")
    spark.sql(f"CREATE TABLE delta.`{table}` (id STRING NOT NULL, n BIGINT) USING delta")
    source = str(tmp_path / "in")
    spark.createDataFrame([(f"r{i}", i) for i in range(20)], "id string, n long").write.json(source)
    df = spark.readStream.schema("id string, n long").json(source)
    df = df.select(F.coalesce("id", F.lit("none")).alias("id"), "n")  # provably not null
    q = exactly_once_to_delta(
        df,
        table,
        sink_id="s",
        checkpoint=str(tmp_path / "chk"),
        trigger=Trigger(available_now=True),
    )
    await_done(q, 120)
    assert q.exception() is None
    from_spark = sorted(r.id for r in spark.read.format("delta").load(table).collect())
    from_rs = sorted(DeltaTable(table).to_pyarrow_table()["id"].to_pylist())
    assert from_spark == from_rs == sorted(f"r{i}" for i in range(20))


def test_two_phase_sink_refuses_complete_mode(spark, tmp_path):
    spark.dataSource.register(DeltaTwoPhaseDataSource)
    counts = rows(spark).groupBy("id").count()
    q = (
        counts.writeStream.format(FORMAT)
        .outputMode("complete")
        .option("sink_id", "s")
        .option("checkpointLocation", str(tmp_path / "chk"))
        .trigger(availableNow=True)
        .start(str(tmp_path / "t"))
    )
    with pytest.raises(StreamingQueryException, match="complete mode"):
        q.awaitTermination(120)
    assert not os.path.exists(tmp_path / "t")  # nothing staged, nothing committed


def test_idempotent_sink_batch_below_the_recorded_one_raises_and_writes_nothing(spark, tmp_path):
    table = str(tmp_path / "t")
    writer = DeltaIdempotentWriter(table, "s", owner=SinkOwner("q-features"))
    df = spark.createDataFrame([("a", 1), ("b", 2)], "id string, n long")
    writer(df, 0)
    writer(df, 1)
    version = DeltaTable(table).version()
    with pytest.raises(BatchRegressionError):
        writer(spark.createDataFrame([("zombie", 0)], "id string, n long"), 0)
    assert DeltaTable(table).version() == version
    assert spark.read.format("delta").load(table).count() == 4
    writer(df, 1)  # the recorded batch again: a replay, skipped
    assert DeltaTable(table).to_pyarrow_table().num_rows == 4


def test_idempotent_sink_with_an_expired_txn_next_to_its_commits_raises_and_writes_nothing(
    spark, tmp_path
):
    import time

    from spark_ext.sinks.errors import DeltaTxnExpiredError

    table = str(tmp_path / "t")
    writer = DeltaIdempotentWriter(table, "s", owner=SinkOwner("q-features"))
    df = spark.createDataFrame([("a", 1), ("b", 2)], "id string, n long")
    writer(df, 0)
    writer(df, 1)
    DeltaTable(table).alter.set_table_properties(
        {"delta.setTransactionRetentionDuration": "interval 1 second"}
    )
    time.sleep(2.5)
    assert DeltaTable(table).transaction_version("s") is None  # expired, as delta-rs reads it
    version = DeltaTable(table).version()
    with pytest.raises(DeltaTxnExpiredError):
        writer(df, 1)  # Spark replays batch 1 after a long stop
    assert DeltaTable(table).version() == version
    assert spark.read.format("delta").load(table).count() == 4
