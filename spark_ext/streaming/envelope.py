"""The envelope: the columns every row of a tracked query carries between its stages; ``kind``
says what a row is (docs/design.md, "Tracked queries")."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
from pyspark.sql.types import IntegerType, LongType, StringType, StructField

from spark_ext.operators.base import SubstreamOperator
from spark_ext.tracker.substreams import Windowing

__all__ = [
    "LATE_COLUMNS",
    "LATE_SCHEMA",
    "REASON_BELOW_FRONTIER",
    "REASON_DUPLICATE",
    "REASON_ENDED",
    "REASON_IDLE",
    "REASON_NO_SUBSTREAM",
    "REASON_NULL_KEY",
    "REASON_NULL_TIME",
    "REASON_UNDECLARED",
    "StageConfig",
]

#: An element (one substream and shard); a partition's frontier (``tracked`` = its
#: ``topic:partition``, ``end_ms`` = the frontier); a tracker end event; a task's report (JSON);
#: an operator's output row; a row for the late output (``reason``, source coordinates).
KIND_DATA = "data"
KIND_PROGRESS = "progress"
KIND_END = "end"
KIND_REPORT = "report"
KIND_RESULT = "result"
KIND_LATE = "late"
#: The groups of the gate's progress, report and late rows; the substream of per-shard operators'.
PROGRESS_GROUP = "__progress__"
REPORTS_GROUP = "__reports__"
LATE_GROUP = "__late__"
ALL_SUBSTREAMS = "*"
#: The stages that report.
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

#: The late-rows output (what :class:`~spark_ext.streaming.handler.BatchHandler` hands the late
#: writer): where the row came from, its key and time, the window(s) it missed, why, the raw row.
LATE_SCHEMA = (
    "src_topic string, src_partition long, src_offset long, key string, "
    "event_time_ms long, window string, reason string, raw string"
)
LATE_COLUMNS = [c.split()[0] for c in LATE_SCHEMA.split(", ")]
#: Late-row column -> its name in the operator stage's output.
LATE_SOURCE = {"key": "late_key", "event_time_ms": "late_time_ms"}

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


@dataclass(frozen=True)
class StageConfig:
    """What the gate and the shards of one tracked query need, fixed when it is planned:
    ``sources``: the declared partitions (empty: an upstream query closes the substreams);
    ``upstream``: rows carry their substream and label, and duplicates go late."""

    operator: SubstreamOperator
    windowing: Windowing
    shards: int
    disorder_ms: int | None
    sources: frozenset[str]
    upstream: bool
    forward_namespace: str | None

    @property
    def result_columns(self) -> list[str]:
        """The columns of the result rows handed to the sink."""
        fwd = ["fwd_substream", "fwd_label"] if self.forward_namespace else []
        return [f.name for f in self.operator.output_schema] + fwd

    @property
    def columns(self) -> list[str]:
        """The operator stage's output columns."""
        return [f.name for f in RESULT_ENVELOPE] + [f.name for f in self.operator.output_schema]


def conform(frame: pd.DataFrame, columns: list[str]) -> pd.DataFrame:
    """``frame`` with exactly ``columns``, built in one step; missing ones are object-typed
    nulls (``reindex`` would fill float NaN, which Arrow cannot turn into a string column)."""
    n = len(frame)
    have = frame.columns
    data = {c: frame[c].array if c in have else np.full(n, None, dtype=object) for c in columns}
    return pd.DataFrame(data, index=frame.index, copy=False)


def end_rows(tracked: str, start_ms: int, end_ms: int, label: int, n: int = 1) -> pd.DataFrame:
    """``n`` ``end`` rows of substream ``tracked`` (``label``: the end event's seq)."""
    return pd.DataFrame(
        {
            "kind": [KIND_END] * n,
            "tracked": [tracked] * n,
            "start_ms": [start_ms] * n,
            "end_ms": [end_ms] * n,
            "label": [label] * n,
            "event_time_ms": [None] * n,
        }
    )


def _plain(v: Any) -> Any:
    if v is None or (isinstance(v, float) and np.isnan(v)):
        return None
    return v.item() if hasattr(v, "item") else v


def raw_json(rows: pd.DataFrame, key: str, time: str, input_columns: list[str]) -> list[str]:
    """Each row's content as JSON (key, event time, the operator's input columns): the late
    output's ``raw``."""
    out = []
    for _, r in rows.iterrows():
        t = _plain(r[time])
        d = {"key": _plain(r[key]), "event_time_ms": None if t is None else int(t)}
        d.update({c: _plain(r[c]) for c in input_columns if c in rows})
        out.append(json.dumps(d, sort_keys=True, default=str))
    return out
