"""One operator call on one group: the code both Spark and the in-memory tester run.

Given a group's rows of one batch (data rows and end-control rows, in the pipeline's
envelope), :func:`run_group` sorts them into a total order, calls the operator, and builds
the task's XOR report: every data row *finished* here is reported with its label (it
cancels the label its sender reported), and -- when results are forwarded to a downstream
query -- every result row is *sent* under the downstream substream, which the flush also
closes explicitly.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from spark_ext.operators.base import EndSignal, Group, OperatorState, SubstreamOperator
from spark_ext.tracker.labels import labels_of
from spark_ext.tracker.reports import ReportBuilder, TaskReport
from spark_ext.tracker.substreams import Substream

KIND_DATA = "data"
KIND_END = "end"
KIND_REPORT = "report"
KIND_RESULT = "result"
#: The group of report rows passed through from the assign stage.
REPORTS_GROUP = "__reports__"
#: The substream of the groups of per-shard operators.
ALL_SUBSTREAMS = "*"
OPERATOR_STAGE = "operator"


@dataclass
class GroupOutput:
    """What one call produced: result rows (or None) and the task report piece."""

    results: pd.DataFrame | None
    report: TaskReport


def forward_id(namespace: str, end: EndSignal) -> str:
    """The downstream substream that a window's results are forwarded into."""
    return Substream(namespace, end.start_ms, end.end_ms).id


def forward_labels(substream: str, keys: pd.Series, row_numbers: np.ndarray) -> np.ndarray:
    """Labels of forwarded result rows: derived from (substream, key, row), stable on replay."""
    coords = [f"{substream}|{k}" for k in keys]
    return labels_of(coords, np.zeros(len(coords), dtype=np.int64), row_numbers)


def run_group(
    op: SubstreamOperator,
    group: Group,
    state: OperatorState,
    rows: pd.DataFrame,
    task_partition: int,
    forward_namespace: str | None = None,
) -> GroupOutput:
    """Run ``op`` over the rows of one group in one batch (see module docstring)."""
    builder = ReportBuilder(OPERATOR_STAGE, task_partition)
    outs: list[pd.DataFrame] = []
    data = rows[rows["kind"] == KIND_DATA]
    if len(data):
        data = data.sort_values(["event_time_ms", "label"], kind="mergesort").reset_index(drop=True)
        builder.add_labels(data["tracked"], data["label"], sent=False)
        produced = op.process(group, state, data)
        if produced is not None and len(produced):
            outs.append(produced)
    ends = rows[rows["kind"] == KIND_END].sort_values(["end_ms", "tracked"], kind="mergesort")
    for seq, tracked, start, end_ms in zip(
        ends["label"], ends["tracked"], ends["start_ms"], ends["end_ms"], strict=True
    ):
        signal = EndSignal(int(seq), str(tracked), int(start), int(end_ms))
        produced = op.flush(group, state, signal)
        if forward_namespace is not None:
            fwd = forward_id(forward_namespace, signal)
            builder.add_close(fwd, signal.end_ms)
            if produced is not None and len(produced):
                produced = produced.reset_index(drop=True)
                labels = forward_labels(fwd, produced["key"], np.arange(len(produced)))
                produced = produced.assign(fwd_substream=fwd, fwd_label=labels)
                builder.add_labels(
                    [fwd] * len(produced), labels, sent=True, ends=[end_ms] * len(produced)
                )
        if produced is not None and len(produced):
            outs.append(produced)
    results = pd.concat(outs, ignore_index=True) if outs else None
    return GroupOutput(results, builder.build())
