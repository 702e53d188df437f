"""Control rows on a batch DataFrame: tracker end events and partition closes, as marked rows."""

from __future__ import annotations

import pytest
from pyspark.sql import functions as F

from spark_ext.hashing import shard_of
from spark_ext.ordering import (
    CLOSED,
    KIND_END,
    KIND_PROGRESS,
    KIND_ROW,
    OrderingConfig,
    end_control_rows,
    mark_progress,
)

pytestmark = pytest.mark.integration


def test_end_events_and_closes_become_end_rows_and_closed_progress(spark):
    config = OrderingConfig.for_topic("t", 1, shards=3)
    data = spark.createDataFrame(
        [
            ("s1", "s1-0", "2026-01-01 00:00:01", 20.0, "t", 0, 0, False),
            (None, None, None, None, "t", 0, 1, True),  # the partition's close record
        ],
        "key string, record_id string, event_time string, value double, topic string, "
        "partition int, offset long, is_end boolean",
    ).withColumn("event_time", F.to_timestamp("event_time"))
    ends = end_control_rows(
        spark.createDataFrame(
            [(7, "s1", 0, 5000)], "seq long, substream string, start_ms long, end_ms long"
        )
    )
    marked = mark_progress(data.unionByName(ends).coalesce(1), config).collect()

    rows = [r for r in marked if r.kind == KIND_ROW]
    assert [(r.key, r.shard) for r in rows] == [("s1", int(shard_of(["s1"], 3)[0]))]
    (end,) = [r for r in marked if r.kind == KIND_END]
    assert (end.key, end.shard, end.topic, end.offset) == ("s1", rows[0].shard, "tracker", 7)
    progress = {(r.topic, r.shard): r.event_time_ms for r in marked if r.kind == KIND_PROGRESS}
    assert {progress[("t", s)] for s in range(3)} == {CLOSED}  # sent to every shard
