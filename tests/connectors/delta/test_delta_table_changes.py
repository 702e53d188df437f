"""The two-phase Delta sink against the table as it is at each commit, not only at start.

The table may change while the query runs (Spark adds a CHECK constraint, switches column
mapping on, enables a feature delta-rs cannot write), and a table may list a feature it does
not use (Spark 4.2 lists the legacy ``invariants`` writer feature on every writer-version-7
table). Driven through the committer on the driver side, as Spark drives it (issue #24: N3,
N4, N5, N6, N10); every table is read back with Spark's Delta reader and with delta-rs.
"""

from __future__ import annotations

import os

import pyarrow as pa
import pytest
from deltalake import DeltaTable
from pyspark.sql.types import LongType, StringType, StructField, StructType
from test_delta_committed_files import spark_commit

from connectors.delta.staging import StagedFile, stage_batches
from connectors.delta.table import ensure_table
from connectors.delta.two_phase import DeltaCommitter
from spark_ext.sinks.errors import (
    DeltaTargetPathError,
    SinkConfigError,
    UnsupportedTableFeatureError,
)
from spark_ext.sinks.protocol import Outcome

SCHEMA = StructType([StructField("id", StringType()), StructField("n", LongType())])
SINK = "s"


def stage(table: str, batch_id: int, rows: list[tuple[str, int]]) -> list[StagedFile]:
    """What one task of ``batch_id`` stages for ``rows``."""
    rb = pa.record_batch(
        [pa.array([r[0] for r in rows], pa.string()), pa.array([r[1] for r in rows], pa.int64())],
        names=["id", "n"],
    )
    return [stage_batches([rb], table, SINK, SCHEMA, batch_id, 0, 0)]


def read_back(spark, table: str) -> tuple[list[tuple], list[tuple]]:
    """(id, n) rows of the table read by delta-rs and by Spark's Delta reader, sorted."""
    rs = DeltaTable(table).to_pyarrow_table(columns=["id", "n"]).to_pylist()
    sp = spark.read.format("delta").load(table).select("id", "n").collect()
    return sorted((r["id"], r["n"]) for r in rs), sorted((r.id, r.n) for r in sp)


def started(table: str) -> DeltaCommitter:
    """A committer as a query start makes it: table made, older drivers fenced."""
    ensure_table(table, SCHEMA)
    committer = DeltaCommitter(table, SINK)
    committer.recover(fence=True)
    return committer


@pytest.fixture
def table(tmp_path) -> str:
    return str(tmp_path / "t")


# -- N3: a CHECK constraint added while the query runs ------------------------------------
def test_check_constraint_added_while_running_refuses_the_next_commit(spark, table):
    committer = started(table)
    spark_commit(committer, 0, stage(table, 0, [("a", 1)]))
    spark.sql(f"ALTER TABLE delta.`{table}` ADD CONSTRAINT positive CHECK (n >= 0)")
    version = DeltaTable(table).version()

    with pytest.raises(UnsupportedTableFeatureError) as err:
        spark_commit(committer, 1, stage(table, 1, [("bad", -5)]))
    assert err.value.feature == "CHECK constraints"
    assert DeltaTable(table).version() == version  # nothing committed
    assert read_back(spark, table) == ([("a", 1)], [("a", 1)])
    assert sorted(os.listdir(table)) == sorted(
        ["_delta_log", *(os.path.basename(u) for u in DeltaTable(table).file_uris())]
    )  # the refused batch's staging removed by abort


# -- N4: column mapping switched on, a column dropped and re-added while running ------------
def test_column_mapping_switched_on_while_running_refuses_the_next_commit(spark, table):
    committer = started(table)
    spark_commit(committer, 0, stage(table, 0, [("a", 1)]))
    t = f"delta.`{table}`"
    spark.sql(
        f"ALTER TABLE {t} SET TBLPROPERTIES ('delta.columnMapping.mode' = 'name', "
        "'delta.minReaderVersion' = '2', 'delta.minWriterVersion' = '5')"
    )
    spark.sql(f"ALTER TABLE {t} DROP COLUMN n")
    spark.sql(f"ALTER TABLE {t} ADD COLUMN n BIGINT")  # same name, a new physical name
    version = DeltaTable(table).version()

    with pytest.raises(UnsupportedTableFeatureError) as err:
        spark_commit(committer, 1, stage(table, 1, [("b", 2)]))
    assert err.value.feature == "column mapping"
    assert DeltaTable(table).version() == version
    from_rs, from_spark = read_back(spark, table)
    # The re-added n is a new column: null for batch 0's row. (delta-rs 1.6 reads the dropped
    # column's data under its old physical name; that is the reader's, not the sink's, doing.)
    assert from_spark == [("a", None)]
    assert [r[0] for r in from_rs] == ["a"]


# -- N5: features delta-rs cannot write -----------------------------------------------------
#: Table property that turns the feature on, and the feature the error names.
UNWRITABLE = {
    "inCommitTimestamp": "'delta.enableInCommitTimestamps' = 'true'",
    "rowTracking": "'delta.enableRowTracking' = 'true'",
}


@pytest.mark.parametrize("feature", sorted(UNWRITABLE))
def test_feature_delta_rs_cannot_write_enabled_while_running_is_refused_by_name(
    spark, table, feature
):
    committer = started(table)
    spark_commit(committer, 0, stage(table, 0, [("a", 1)]))
    spark.sql(f"ALTER TABLE delta.`{table}` SET TBLPROPERTIES ({UNWRITABLE[feature]})")
    version = DeltaTable(table).version()

    with pytest.raises(UnsupportedTableFeatureError) as err:
        spark_commit(committer, 1, stage(table, 1, [("b", 2)]))
    assert err.value.feature == feature
    assert DeltaTable(table).version() == version
    assert read_back(spark, table) == ([("a", 1)], [("a", 1)])


#: DDL of tables whose writer features delta-rs cannot write, by the feature named.
UNWRITABLE_TABLES = {
    "clustering": "CREATE TABLE {t} (id STRING, n BIGINT) USING delta CLUSTER BY (id)",
    "inCommitTimestamp": "CREATE TABLE {t} (id STRING, n BIGINT) USING delta "
    "TBLPROPERTIES ('delta.enableInCommitTimestamps' = 'true')",
    "rowTracking": "CREATE TABLE {t} (id STRING, n BIGINT) USING delta "
    "TBLPROPERTIES ('delta.enableRowTracking' = 'true')",
}


@pytest.mark.parametrize("feature", sorted(UNWRITABLE_TABLES))
def test_table_with_a_feature_delta_rs_cannot_write_is_refused_at_start_by_name(
    spark, table, feature
):
    spark.sql(UNWRITABLE_TABLES[feature].format(t=f"delta.`{table}`"))
    with pytest.raises(UnsupportedTableFeatureError) as err:
        ensure_table(table, SCHEMA)
    assert err.value.feature == feature


# -- N6: the legacy invariants writer feature listed on a table without invariants ----------
def test_writer_version_7_table_without_column_invariants_is_written(spark, table):
    # A table feature makes Spark 4.2 write protocol (3, 7) listing appendOnly and invariants
    # too (deletion vectors do the same, but delta-rs 1.6 cannot read such a table back).
    spark.sql(
        f"CREATE TABLE delta.`{table}` (id STRING, n BIGINT) USING delta "
        "TBLPROPERTIES ('delta.feature.timestampNtz' = 'supported')"
    )
    assert "invariants" in (DeltaTable(table).protocol().writer_features or [])

    committer = started(table)
    assert spark_commit(committer, 0, stage(table, 0, [("a", 1), ("b", 2)])) is Outcome.COMMITTED
    assert read_back(spark, table) == ([("a", 1), ("b", 2)], [("a", 1), ("b", 2)])


def test_column_with_an_invariant_is_refused(table):
    # What Delta writes for a column invariant (delta-rs and Spark 4.2 cannot create one).
    invariant = {"delta.invariants": '{"expression": {"expression": "n > 0"}}'}
    DeltaTable.create(
        table,
        schema=pa.schema(
            [pa.field("id", pa.string()), pa.field("n", pa.int64(), metadata=invariant)]
        ),
    )
    with pytest.raises(UnsupportedTableFeatureError) as err:
        ensure_table(table, SCHEMA)
    assert err.value.feature == "column invariant"


# -- N10: a target path that is no Delta table ----------------------------------------------
def test_target_path_that_is_a_file_is_a_typed_error_naming_it(tmp_path):
    path = tmp_path / "t"
    path.write_text("not a table")
    with pytest.raises(DeltaTargetPathError) as err:
        ensure_table(str(path), SCHEMA)
    assert err.value.path == str(path)
    assert isinstance(err.value, SinkConfigError)
    assert path.read_text() == "not a table"


def test_folder_of_other_files_is_refused_not_made_a_table(tmp_path):
    path = tmp_path / "t"
    path.mkdir()
    (path / "part-0.parquet").write_bytes(b"PAR1 someone's data")
    with pytest.raises(DeltaTargetPathError) as err:
        ensure_table(str(path), SCHEMA)
    assert err.value.path == str(path)
    assert sorted(os.listdir(path)) == ["part-0.parquet"]  # no _delta_log made
