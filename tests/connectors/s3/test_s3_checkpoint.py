"""A Spark streaming query with its checkpoint and tables on s3a://, through the checkpoint file
manager Spark recommends on S3 (docs/design.md, "Object storage"): two batches, a restart, a
third batch, every row once."""

from __future__ import annotations

import pyarrow as pa
import pytest
from deltalake import write_deltalake

from spark_ext import storage
from spark_ext.storage import S3_CHECKPOINT_FILE_MANAGER, Location, StorageSettings
from tests.conftest import await_done

pytestmark = pytest.mark.integration

CHECKPOINT_MANAGER_CONF = "spark.sql.streaming.checkpointFileManagerClass"


def _run(spark, source: str, sink: str, checkpoint: str) -> None:
    query = (
        spark.readStream.format("delta")
        .option("maxFilesPerTrigger", 1)
        .load(source)
        .writeStream.format("delta")
        .option("checkpointLocation", checkpoint)
        .trigger(availableNow=True)
        .start(sink)
    )
    await_done(query, 180)


def test_streaming_query_checkpoints_on_s3a_and_restarts(
    s3_spark, s3_root: Location, s3_settings: StorageSettings
) -> None:
    source, sink, checkpoint = (s3_root.join(n) for n in ("source", "sink", "checkpoint"))
    uri, options = storage.delta_storage(source, s3_settings)

    def append(ids: list[int]) -> None:
        write_deltalake(uri, pa.table({"id": ids}), storage_options=options, mode="append")

    append([1, 2])
    append([3])
    s3_spark.conf.set(CHECKPOINT_MANAGER_CONF, S3_CHECKPOINT_FILE_MANAGER)
    try:
        _run(s3_spark, *(storage.spark_uri(x) for x in (source, sink, checkpoint)))
        assert storage.list_prefix(checkpoint.join("commits"), s3_settings) == ["0", "1"]
        append([4, 5])
        _run(s3_spark, *(storage.spark_uri(x) for x in (source, sink, checkpoint)))
    finally:
        s3_spark.conf.unset(CHECKPOINT_MANAGER_CONF)

    assert storage.list_prefix(checkpoint.join("commits"), s3_settings) == ["0", "1", "2"]
    rows = s3_spark.read.format("delta").load(storage.spark_uri(sink)).collect()
    assert sorted(r.id for r in rows) == [1, 2, 3, 4, 5]
