"""DeltaDedupSink and the batch order (docs/design.md, invariant 6): a batch id below the one
recorded is a typed error and writes nothing; committed files are never deleted."""

from __future__ import annotations

import datetime as dt
import os
import time
from pathlib import Path

import pytest

from connectors.delta.dedup_sink import DeltaDedupSink
from spark_ext.dedup import DedupConfig
from spark_ext.sinks.errors import BatchRegressionError, DeltaTxnExpiredError, SinkOwnerError
from spark_ext.sinks.owner import SinkOwner

pytestmark = pytest.mark.integration

T0 = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)


def readings(spark, batch_id: int, n: int = 6):
    """Batch ``batch_id``: ``n`` readings, the first one a copy of the previous batch's last."""
    rows = [
        (f"r{batch_id * (n - 1) + i:04d}", T0 + dt.timedelta(seconds=i), "t", 0, batch_id * 100 + i)
        for i in range(n)
    ]
    return spark.createDataFrame(
        rows, "reading_id string, event_time timestamp, topic string, partition int, offset long"
    )


OWNER = SinkOwner("2f4e8d52-0b51-4b57-9a0e-2c1d1e0f7a10")


def dedup_config(root: Path) -> DedupConfig:
    """Two buckets, the catalog in ``root``."""
    return DedupConfig(
        catalog_path=str(root / "catalog"),
        capacity=1_000,
        buckets=2,
        id_column="reading_id",
        coordinate_columns=("topic", "partition", "offset"),
    )


def make_sink(root: Path, state: str = "state", owner: SinkOwner = OWNER) -> DeltaDedupSink:
    return DeltaDedupSink(dedup_config(root), root / "out", "orders", root / state, owner=owner)


def snapshot(root: Path) -> dict[str, object]:
    """Everything a batch could write: the output's data files, the catalog's version, the files
    in the table folders. (A restart may commit the sink's run epoch to the output: no data.)"""
    from deltalake import DeltaTable

    return {
        "out": sorted(DeltaTable(str(root / "out")).file_uris()),
        "catalog": DeltaTable(str(root / "catalog")).version(),
        "out_files": sorted(os.listdir(root / "out")),
        "catalog_files": sorted(p for _, _, fs in os.walk(root / "catalog") for p in fs),
    }


def write_batches(spark, root: Path, batches: int) -> dict[str, object]:
    """Batches 0 .. ``batches - 1`` written by a first sink; the :func:`snapshot` after them."""
    first = make_sink(root)
    for batch_id in range(batches):
        first(readings(spark, batch_id), batch_id)
    return snapshot(root)


@pytest.mark.parametrize("state", ["state", "new_state"], ids=["same_state", "state_reset"])
def test_batch_below_the_recorded_one_is_refused_and_writes_nothing(spark, tmp_path, state):
    before = write_batches(spark, tmp_path, 3)

    restarted = make_sink(tmp_path, state)  # the same query (a zombie driver) at batch 1
    with pytest.raises(BatchRegressionError) as err:
        restarted(readings(spark, 1), 1)
    assert (err.value.batch_id, err.value.recorded) == (1, 2)
    assert snapshot(tmp_path) == before


def test_reset_checkpoint_is_another_owner_and_writes_nothing(spark, tmp_path):
    before = write_batches(spark, tmp_path, 3)

    # A reset checkpoint is a new query id: refused as another owner, at its batch 0 or 1.
    reset = SinkOwner("6a1c0c47-5d1c-4c8e-8f0e-8b6f3e5e9d22")
    with pytest.raises(SinkOwnerError) as err:
        make_sink(tmp_path, "new_state", reset)(readings(spark, 1), 1)
    assert (err.value.recorded, err.value.ours) == (OWNER.query_id, reset.query_id)
    assert snapshot(tmp_path) == before


def test_replay_of_the_recorded_batch_is_skipped_and_writes_nothing(spark, tmp_path):
    before = write_batches(spark, tmp_path, 2)
    make_sink(tmp_path)(readings(spark, 1), 1)
    assert snapshot(tmp_path) == before
    out = spark.read.format("delta").load(str(tmp_path / "out"))
    assert out.count() == out.select("reading_id").distinct().count() == 11


def test_restart_with_an_expired_txn_keeps_every_committed_file(spark, tmp_path):
    """The output's txn reads as None (retention expired) next to committed files: the sink
    refuses with a typed error instead of taking the files for orphans and deleting them."""
    from deltalake import DeltaTable

    write_batches(spark, tmp_path, 2)
    out = DeltaTable(str(tmp_path / "out"))
    out.alter.set_table_properties({"delta.setTransactionRetentionDuration": "interval 1 seconds"})
    committed = [f.rsplit("/", 1)[-1] for f in DeltaTable(str(tmp_path / "out")).file_uris()]
    time.sleep(2.5)
    assert DeltaTable(str(tmp_path / "out")).transaction_version("orders") is None

    with pytest.raises(DeltaTxnExpiredError):
        make_sink(tmp_path)(readings(spark, 2), 2)
    assert all((tmp_path / "out" / name).exists() for name in committed)
    assert DeltaTable(str(tmp_path / "out")).to_pyarrow_table().num_rows == 11
