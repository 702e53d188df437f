"""The envelope: the columns every row of a tracked query carries between its stages.

``kind`` says what a row is: ``data`` (an element, one substream and shard), ``progress`` (a
partition's frontier: ``tracked`` = ``topic:partition``, ``end_ms`` = the frontier, one per
shard), ``end`` (a tracker end event, one per shard), ``report`` (a task's
:class:`~spark_ext.tracker.reports.TaskReport` as JSON), ``late`` (to the late output with
``reason`` and source coordinates), ``result`` (an operator's output row).
"""

from __future__ import annotations

import pandas as pd
from pyspark.sql.types import IntegerType, LongType, StringType, StructField

__all__ = [
    "ALL_SUBSTREAMS",
    "ENVELOPE_FIELDS",
    "GATE_STAGE",
    "KIND_DATA",
    "KIND_END",
    "KIND_LATE",
    "KIND_PROGRESS",
    "KIND_REPORT",
    "KIND_RESULT",
    "LATE_COLUMNS",
    "LATE_GROUP",
    "OPERATOR_STAGE",
    "PROGRESS_GROUP",
    "REASON_BELOW_FRONTIER",
    "REASON_DUPLICATE",
    "REASON_ENDED",
    "REASON_IDLE",
    "REASON_NO_SUBSTREAM",
    "REASON_NULL_KEY",
    "REASON_NULL_TIME",
    "REASON_UNDECLARED",
    "REPORTS_GROUP",
    "RESULT_ENVELOPE",
    "SOURCE_FIELDS",
    "conform",
]

KIND_DATA = "data"
KIND_END = "end"
KIND_PROGRESS = "progress"
KIND_REPORT = "report"
KIND_RESULT = "result"
KIND_LATE = "late"
#: The group of the gate's progress rows.
PROGRESS_GROUP = "__progress__"
#: The group of report rows passed through from the gate.
REPORTS_GROUP = "__reports__"
#: The group of late rows passed through from the gate.
LATE_GROUP = "__late__"
#: The substream of the groups of per-shard operators.
ALL_SUBSTREAMS = "*"
GATE_STAGE = "assign"
OPERATOR_STAGE = "operator"

#: Why a row went to the late-rows output (the ``reason`` column).
REASON_BELOW_FRONTIER = "event time below its partition's frontier"
REASON_NULL_KEY = "null key"
REASON_NULL_TIME = "null event time"
REASON_NO_SUBSTREAM = "forwarded row without a substream"
REASON_DUPLICATE = "duplicate forwarded row (label already folded)"
REASON_ENDED = "window already ended"
REASON_IDLE = "partition declared idle: completeness downgraded (windows released without it)"
REASON_UNDECLARED = "partition not declared (no window waits for it)"

#: Source coordinates and late-row fields, carried by data rows so a row found late in the
#: operator stage still names where it came from.
SOURCE_FIELDS = [
    StructField("src_topic", StringType()),
    StructField("src_partition", LongType()),
    StructField("src_offset", LongType()),
    StructField("reason", StringType()),
    StructField("raw", StringType()),
]

ENVELOPE_FIELDS = [
    StructField("substream", StringType()),
    StructField("shard", IntegerType()),
    StructField("kind", StringType()),
    StructField("tracked", StringType()),
    StructField("start_ms", LongType()),
    StructField("end_ms", LongType()),
    StructField("key", StringType()),
    StructField("event_time_ms", LongType()),
    StructField("label", LongType()),
    StructField("side", StringType()),
    StructField("report", StringType()),
    *SOURCE_FIELDS,
]

#: The columns of the late-rows output (what :class:`~spark_ext.streaming.handler.BatchHandler`
#: hands the late writer): the raw row as JSON, where it came from, the window(s) it missed.
LATE_COLUMNS = [
    "src_topic",
    "src_partition",
    "src_offset",
    "key",
    "event_time_ms",
    "window",
    "reason",
    "raw",
]

RESULT_ENVELOPE = [
    StructField("kind", StringType()),
    StructField("report", StringType()),
    StructField("fwd_substream", StringType()),
    StructField("fwd_label", LongType()),
    StructField("window", StringType()),
    StructField("late_key", StringType()),
    StructField("late_time_ms", LongType()),
    *SOURCE_FIELDS,
]


def conform(frame: pd.DataFrame, columns: list[str]) -> pd.DataFrame:
    """``frame`` with exactly ``columns``; missing ones are object-typed nulls.

    (``reindex`` would fill float NaN, which Arrow cannot turn into a string column.)
    """
    for c in columns:
        if c not in frame.columns:
            frame[c] = pd.Series([None] * len(frame), dtype=object, index=frame.index)
    return frame[columns]
