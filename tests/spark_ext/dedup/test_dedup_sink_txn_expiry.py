"""DedupSink when a table's ``txn`` expired: the replay is refused, not written again.

``DedupSink`` appends its catalog, output and late rows with ``txnAppId``/``txnVersion``. After
``delta.setTransactionRetentionDuration`` the ``txn`` reads as none, and Spark's writer, which
only skips a version at or below the recorded one, writes a replayed batch a second time. Like
every txnAppId writer it must recognise the expiry (its commits are in the table) and stop with
``DeltaTxnExpiredError`` before writing anything (issue #24).
"""

from __future__ import annotations

import time

import pytest
from deltalake import DeltaTable

from spark_ext.dedup import DedupConfig, DedupMetrics, DedupSink
from spark_ext.sinks.errors import DeltaTxnExpiredError
from spark_ext.sinks.owner import SinkOwner

pytestmark = pytest.mark.integration

OWNER = SinkOwner("0b7a5f0e-1f7e-4d0c-8a51-3c8f5b1f2e01")
SCHEMA = (
    "record_id string, event_time timestamp, topic string, partition int, offset long, "
    "value double, _kind string, _bucket int, _generation long, _detail string"
)


def tagged(spark, batch_id: int):
    """What the dedup operator emits for one batch: two new rows, one late row, metrics."""
    import datetime as dt

    t = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
    metrics = DedupMetrics(rows=3, late_rows=1).to_json()
    b = batch_id * 10
    return spark.createDataFrame(
        [
            (f"r{b}", t, "t", 0, b, 1.0, "new", 0, 0, None),
            (f"r{b + 1}", t, "t", 0, b + 1, 2.0, "new", 1, 0, None),
            (f"r{b + 2}", t, "t", 0, b + 2, 3.0, "late", 0, 0, None),
            (None, None, None, None, None, None, "metrics", 0, None, metrics),
        ],
        SCHEMA,
    )


def make_sink(root) -> DedupSink:
    config = DedupConfig(catalog_path=str(root / "catalog"), capacity=1_000, buckets=2)
    return DedupSink(
        config,
        str(root / "out"),
        "folds",
        output_columns=["record_id", "value"],
        quarantine_path=str(root / "late"),
        owner=OWNER,
    )


def counts(spark, root) -> dict[str, tuple[int, int]]:
    """Rows of each table, read by Spark's Delta reader and by delta-rs."""
    return {
        name: (
            spark.read.format("delta").load(str(root / name)).count(),
            DeltaTable(str(root / name)).to_pyarrow_table().num_rows,
        )
        for name in ("out", "catalog", "late")
    }


def test_replay_after_the_txn_expired_is_refused_and_writes_nothing(spark, tmp_path):
    sink = make_sink(tmp_path)
    sink(tagged(spark, 0), 0)
    sink(tagged(spark, 1), 1)
    before = counts(spark, tmp_path)
    assert before == {"out": (4, 4), "catalog": (4, 4), "late": (2, 2)}
    for name in ("out", "catalog", "late"):  # what the txn-retention fault class does
        DeltaTable(str(tmp_path / name)).alter.set_table_properties(
            {"delta.setTransactionRetentionDuration": "interval 1 seconds"}
        )
    time.sleep(2.5)
    assert DeltaTable(str(tmp_path / "out")).transaction_version("folds") is None

    with pytest.raises(DeltaTxnExpiredError):
        make_sink(tmp_path)(tagged(spark, 1), 1)  # Spark replays batch 1 after a long stop
    assert counts(spark, tmp_path) == before
