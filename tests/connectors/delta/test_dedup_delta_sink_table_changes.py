"""DeltaDedupSink commits against the output table as it is at each commit (issue #24, N3).

Its output goes through the two-phase sink's commit: a CHECK constraint Spark adds to the
output while the query runs must stop the next batch before its commit, as it stops Spark's
own writer, instead of committing rows that break it.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest
from deltalake import DeltaTable

from connectors.delta.dedup_sink import DeltaDedupSink
from spark_ext.dedup import DedupConfig
from spark_ext.sinks.errors import UnsupportedTableFeatureError
from spark_ext.sinks.owner import SinkOwner

pytestmark = pytest.mark.integration

T0 = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
OWNER = SinkOwner("5b3c8e1a-7d2f-4c6b-9e0a-1f2d3c4b5a69")


def readings(spark, batch_id: int, offsets: list[int]):
    rows = [(f"r{batch_id}-{o}", T0 + dt.timedelta(seconds=o), "t", 0, o) for o in offsets]
    return spark.createDataFrame(
        rows, "reading_id string, event_time timestamp, topic string, partition int, offset long"
    )


def make_sink(root: Path) -> DeltaDedupSink:
    config = DedupConfig(
        catalog_path=str(root / "catalog"), capacity=1_000, buckets=2, id_column="reading_id"
    )
    return DeltaDedupSink(config, root / "out", "orders", root / "state", owner=OWNER)


def test_check_constraint_added_while_running_stops_the_next_batch_before_its_commit(
    spark, tmp_path
):
    sink = make_sink(tmp_path)
    sink(readings(spark, 0, [1, 2]), 0)
    out = str(tmp_path / "out")
    spark.sql(f"ALTER TABLE delta.`{out}` ADD CONSTRAINT positive CHECK (offset >= 0)")
    version = DeltaTable(out).version()

    with pytest.raises(UnsupportedTableFeatureError) as err:
        sink(readings(spark, 1, [-5]), 1)
    assert err.value.feature == "CHECK constraints"
    assert DeltaTable(out).version() == version
    offsets = sorted(r.offset for r in spark.read.format("delta").load(out).collect())
    assert offsets == sorted(DeltaTable(out).to_pandas()["offset"].tolist()) == [1, 2]
