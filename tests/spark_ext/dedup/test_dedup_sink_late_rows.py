"""DedupSink and late rows (docs/design.md, invariant 7): quarantined, or the batch stops."""

from __future__ import annotations

import pytest

from spark_ext.dedup import DedupMetrics, DedupSink, LateRowsWithoutQuarantineError
from spark_ext.sinks.owner import SinkOwner

pytestmark = pytest.mark.integration

OWNER = SinkOwner("q-late-rows")
SCHEMA = "key string, record_id string, value double, _kind string, _bucket int, _detail string"


def tagged(spark):
    """What order_and_fold emits for one shard: a new row, a late row, the shard's metrics."""
    metrics = DedupMetrics(rows=2, late_rows=1).to_json()
    return spark.createDataFrame(
        [
            ("s1", "r1", 1.0, "new", 0, None),
            ("s1", "r0", 0.5, "late", 0, None),
            (None, None, None, "metrics", 0, metrics),
        ],
        SCHEMA,
    )


def test_late_rows_without_a_quarantine_stop_the_batch_and_nothing_is_written(spark, tmp_path):
    sink = DedupSink(None, str(tmp_path / "out"), sink_id="folds", owner=OWNER)
    with pytest.raises(LateRowsWithoutQuarantineError) as err:
        sink(tagged(spark), 0)
    assert err.value.rows == 1
    assert not (tmp_path / "out").exists()


def test_late_rows_go_to_the_quarantine(spark, tmp_path):
    sink = DedupSink(
        None, str(tmp_path / "out"), "folds", quarantine_path=str(tmp_path / "late"), owner=OWNER
    )
    sink(tagged(spark), 0)
    late = spark.read.format("delta").load(str(tmp_path / "late"))
    assert [r["record_id"] for r in late.collect()] == ["r0"]
    out = spark.read.format("delta").load(str(tmp_path / "out"))
    assert [r["record_id"] for r in out.collect()] == ["r1"]
