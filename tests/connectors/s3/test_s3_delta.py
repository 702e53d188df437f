"""Delta tables on the local S3 store: delta-rs (conditional put) and Spark's Delta (s3a://)
each read back what the other wrote."""

from __future__ import annotations

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

from spark_ext import storage
from spark_ext.storage import Location, StorageSettings

pytestmark = pytest.mark.integration


def test_spark_reads_a_table_delta_rs_wrote_with_conditional_put(
    s3_spark, s3_root: Location, s3_settings: StorageSettings
) -> None:
    uri, options = storage.delta_storage(s3_root.join("from_rs"), s3_settings)
    assert options["conditional_put"] == "etag"
    write_deltalake(uri, pa.table({"id": [1, 2, 3]}), storage_options=options)
    write_deltalake(uri, pa.table({"id": [4, 5]}), storage_options=options, mode="append")
    assert DeltaTable(uri, storage_options=options).version() == 1

    df = s3_spark.read.format("delta").load(storage.spark_uri(s3_root.join("from_rs")))
    assert sorted(r.id for r in df.collect()) == [1, 2, 3, 4, 5]


def test_delta_rs_reads_a_table_spark_wrote_via_s3a(
    s3_spark, s3_root: Location, s3_settings: StorageSettings
) -> None:
    table = s3_root.join("from_spark")
    s3_spark.range(4).write.format("delta").save(storage.spark_uri(table))
    s3_spark.range(4, 6).write.format("delta").mode("append").save(storage.spark_uri(table))

    uri, options = storage.delta_storage(table, s3_settings)
    dt = DeltaTable(uri, storage_options=options)
    assert dt.version() == 1
    assert sorted(dt.to_pyarrow_table()["id"].to_pylist()) == list(range(6))
    assert any(p.startswith("_delta_log/") for p in storage.list_prefix(table, s3_settings))
