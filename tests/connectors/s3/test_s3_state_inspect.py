"""State inspection of a checkpoint in the local S3 store: rows and bytes per partition as on a
local checkpoint, and typed one-line errors naming the location."""

from __future__ import annotations

import pytest

from spark_ext import storage
from spark_ext.state_inspect import CheckpointNotFound, StateInspector
from spark_ext.storage import S3_CHECKPOINT_FILE_MANAGER, BucketNotFound, Location, StorageSettings
from tests.conftest import await_done

pytestmark = pytest.mark.integration

CHECKPOINT_MANAGER_CONF = "spark.sql.streaming.checkpointFileManagerClass"


def test_report_reads_a_checkpoint_on_s3(
    s3_spark, s3_root: Location, s3_settings: StorageSettings
) -> None:
    checkpoint = s3_root.join("chk")
    s3_spark.conf.set(CHECKPOINT_MANAGER_CONF, S3_CHECKPOINT_FILE_MANAGER)
    try:
        query = (
            s3_spark.readStream.format("rate-micro-batch")
            .option("rowsPerBatch", 20)
            .load()
            .selectExpr("value % 5 AS key")
            .groupBy("key")
            .count()
            .writeStream.format("noop")
            .outputMode("update")
            .option("checkpointLocation", storage.spark_uri(checkpoint))
            .trigger(once=True)
            .start()
        )
        await_done(query, 300)
    finally:
        s3_spark.conf.unset(CHECKPOINT_MANAGER_CONF)

    report = StateInspector(s3_spark, str(checkpoint)).report()  # the s3:// form
    assert report.checkpoint == storage.spark_uri(checkpoint)
    assert report.batch_id == 0
    assert report.rows() == 5
    state = storage.file_sizes(checkpoint.join("state"), s3_settings)
    per_partition = [sum(n for f, n in state.items() if f.startswith(f"0/{p}/")) for p in (0, 1)]
    assert [p.bytes_on_disk for p in report.partitions] == per_partition
    assert all(per_partition)


def test_a_missing_checkpoint_or_bucket_on_s3_is_a_typed_error(s3_spark, s3_root: Location) -> None:
    with pytest.raises(CheckpointNotFound, match=s3_root.path):
        StateInspector(s3_spark, storage.spark_uri(s3_root.join("none"))).report()
    with pytest.raises(BucketNotFound, match="s3://no-such-bucket/chk/commits: bucket") as raised:
        StateInspector(s3_spark, "s3a://no-such-bucket/chk").report()
    assert "\n" not in str(raised.value)
