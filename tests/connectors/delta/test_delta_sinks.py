"""The exactly-once Delta sinks in-process: one Delta version per batch, replays skipped."""

from __future__ import annotations

import os

import pytest
from chispa import assert_df_equality
from deltalake import DeltaTable

from connectors.delta.two_phase import DeltaCommitter
from connectors.sinks import Trigger, exactly_once_to_delta
from jobs.exactly_once_delta import events_stream
from tests.conftest import await_done
from tests.connectors.conftest import EVENTS, MAX_OFFSETS

pytestmark = pytest.mark.integration


def data_commits(dt: DeltaTable) -> list[int]:
    """The batch ids of the table's commits that hold a batch, oldest first."""
    return [
        int(h["spark_ext.batch_id"]) for h in reversed(dt.history()) if "spark_ext.batch_id" in h
    ]


def run_once(spark, bootstrap, topic, table, chk, mode, sink_id="events"):
    df = events_stream(spark, bootstrap, topic, MAX_OFFSETS)
    q = exactly_once_to_delta(
        df, table, sink_id=sink_id, checkpoint=chk, mode=mode, trigger=Trigger(available_now=True)
    )
    await_done(q, 300)
    assert q.exception() is None
    return q


@pytest.mark.parametrize("mode", ["two_phase", "idempotent"])
def test_each_batch_is_one_delta_version_with_its_txn(
    spark, kafka_bootstrap, events_topic, tmp_path, mode
):
    table = str(tmp_path / "table")
    run_once(spark, kafka_bootstrap, events_topic, table, str(tmp_path / "chk"), mode)

    got = spark.read.format("delta").load(table)
    assert got.count() == EVENTS
    assert got.select("topic", "partition", "offset").distinct().count() == EVENTS
    dt = DeltaTable(table)
    batches = EVENTS // MAX_OFFSETS
    assert dt.transaction_version("events") == batches - 1
    # delta-rs reads the same rows Spark's Delta reader does.
    from_rs = spark.createDataFrame(dt.to_pandas(), schema=got.schema)
    assert_df_equality(got, from_rs, ignore_row_order=True, ignore_nullable=True)
    if mode == "two_phase":
        # one commit per batch (besides the create and the start's run-epoch commit)
        assert data_commits(dt) == list(range(batches))
        # every file this sink wrote into the folder is referenced by the table
        on_disk = sorted(name for name, _ in DeltaCommitter(table, "events").staged_files())
        assert on_disk == sorted(os.path.basename(uri) for uri in dt.file_uris())
