"""The idempotent Delta writer when its replay evidence is gone (issue #24, suspicion (b)).

``delta.setTransactionRetentionDuration`` drops the sink's ``txn`` from snapshots; log clean-up
(a checkpoint, then ``cleanup_metadata`` past ``delta.logRetentionDuration``) drops the commits
whose ``commitInfo`` named the sink. With both gone, a replay of the last batch must still be
refused (``DeltaTxnExpiredError``), never written again; a table that never had the sink is
still written.
"""

from __future__ import annotations

import time

import pytest
from deltalake import DeltaTable

from connectors.delta.idempotent import DeltaIdempotentWriter
from spark_ext.sinks.errors import DeltaTxnExpiredError
from spark_ext.sinks.owner import SinkOwner

pytestmark = pytest.mark.integration

OWNER = SinkOwner("7d0c4d4e-6c4f-4f55-9f57-0f5b2f0b8a11")
ONE_SECOND = "interval 1 seconds"


def expire_txns_and_clean_the_log(table: str) -> None:
    """What a long stop does to a table with short retentions: every ``txn`` expired and the
    commits before a new checkpoint deleted."""
    DeltaTable(table).alter.set_table_properties(
        {
            "delta.setTransactionRetentionDuration": ONE_SECOND,
            "delta.logRetentionDuration": ONE_SECOND,
        }
    )
    time.sleep(2.5)
    dt = DeltaTable(table)
    dt.create_checkpoint()
    dt.cleanup_metadata()


def writer(table: str, sink_id: str = "s") -> DeltaIdempotentWriter:
    return DeltaIdempotentWriter(table, sink_id, owner=OWNER)


def test_replay_after_txn_expiry_and_log_clean_up_is_refused(spark, tmp_path):
    table = str(tmp_path / "t")
    df = spark.createDataFrame([("a", 1), ("b", 2)], "id string, n long")
    first = writer(table)
    first(df, 0)
    first(df, 1)
    expire_txns_and_clean_the_log(table)
    dt = DeltaTable(table)
    assert dt.transaction_version("s") is None  # the txn expired
    assert not [h for h in dt.history() if "spark_ext" in str(h)]  # no commit names the sink
    version = dt.version()

    with pytest.raises(DeltaTxnExpiredError):
        writer(table)(df, 1)  # Spark replays batch 1 after the long stop
    assert DeltaTable(table).version() == version
    assert spark.read.format("delta").load(table).count() == 4
    assert DeltaTable(table).to_pyarrow_table().num_rows == 4


def test_new_sink_on_a_cleaned_table_of_another_sink_is_written(spark, tmp_path):
    table = str(tmp_path / "t")
    df = spark.createDataFrame([("a", 1), ("b", 2)], "id string, n long")
    writer(table, "other")(df, 0)
    expire_txns_and_clean_the_log(table)
    # Back to a long retention: the read-back below must not race a 1-second txn expiry.
    DeltaTable(table).alter.set_table_properties(
        {"delta.setTransactionRetentionDuration": "interval 7 days"}
    )

    writer(table, "s")(df, 0)  # another sink id, never on this table: not an expiry
    assert DeltaTable(table).transaction_version("s") == 0
    assert spark.read.format("delta").load(table).count() == 4
    assert DeltaTable(table).to_pyarrow_table().num_rows == 4
