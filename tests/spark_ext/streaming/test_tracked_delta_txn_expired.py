"""The tracker job's Delta outputs under ``delta.setTransactionRetentionDuration``.

A batch whose windows landed but whose Spark commit did not is replayed with the same id on
restart. If the table's ``txn`` for the output expired meanwhile, Spark's
``txnAppId``/``txnVersion`` can no longer tell the replay from a new batch: the output must stop
with :class:`~spark_ext.sinks.errors.DeltaTxnExpiredError` and write nothing (the fault
matrix's ``txn-retention`` cell measured 35 duplicate windows before the fix).
"""

from __future__ import annotations

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.crash]


def test_a_replayed_batch_after_its_txn_expired_stops_typed_and_writes_no_window_twice(
    spark, kafka_bootstrap, new_topic, tmp_path, monkeypatch
):
    from pyspark.errors import StreamingQueryException

    from connectors.kafka import produce
    from jobs.tracker_windows import demo_records, start_windows
    from spark_ext.crash import FAULT_ENV
    from spark_ext.recovery.retention import expire_txns

    topic = new_topic("trk-txn", partitions=3)
    produce(kafka_bootstrap, topic, demo_records(150, 3))
    out = tmp_path / "out"

    def windows() -> int:
        return spark.read.format("delta").load(str(out / "windows")).count()

    # Run 1: batch 1's windows are written, then the driver fails before Spark's commit.
    monkeypatch.setenv(FAULT_ENV, "tracker.after_sink@1:raise")
    query, _ = start_windows(spark, kafka_bootstrap, topic, 3, out, max_offsets_per_trigger=60)
    with pytest.raises(StreamingQueryException, match="InjectedFault"):
        query.processAllAvailable()
    query.stop()
    monkeypatch.delenv(FAULT_ENV)
    written = windows()
    assert written > 0

    # Retention drops the output's txn; run 2 replays batch 1 from the checkpoint.
    expire_txns(out / "windows")
    query, _ = start_windows(spark, kafka_bootstrap, topic, 3, out, max_offsets_per_trigger=60)
    try:
        with pytest.raises(StreamingQueryException, match="DeltaTxnExpiredError"):
            query.processAllAvailable()
    finally:
        query.stop()
    assert windows() == written
