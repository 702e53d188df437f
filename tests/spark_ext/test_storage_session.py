"""The settings a call without any reaches storage with are those of the session the user built,
also after a streaming batch made its own cloned session the Python-side active one."""

from __future__ import annotations

from pathlib import Path

import pytest
from pyspark.sql import DataFrame, SparkSession

from spark_ext import storage

pytestmark = pytest.mark.integration


def test_settings_set_after_a_foreach_batch_query_are_the_ones_calls_without_settings_use(
    spark: SparkSession, tmp_path: Path
) -> None:
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "a.json").write_text('{"a": 1}\n')

    def batch(df: DataFrame, _batch_id: int) -> None:
        # pyspark makes the batch's session (a clone taken at the query's start) the active one
        df.sparkSession.createDataFrame([(1,)], "a int").count()

    query = (
        spark.readStream.schema("a int")
        .json(str(tmp_path / "in"))
        .writeStream.foreachBatch(batch)
        .option("checkpointLocation", str(tmp_path / "chk"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(120)
    assert not query.isActive
    key = "fs.s3a.endpoint"
    spark.conf.set(key, "http://127.0.0.1:9")
    try:
        assert storage.session_settings().endpoint == "http://127.0.0.1:9"
    finally:
        spark.conf.unset(key)
    assert storage.session_settings().endpoint == ""
