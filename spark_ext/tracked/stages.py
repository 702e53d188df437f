"""The executor side of a tracked query: the gate stage and the operator stage.

* :class:`GateProcessor` -- ``transformWithStateInPandas`` keyed by source partition: keeps
  the partition's frontier (one value in state) and runs :func:`~spark_ext.tracked.gate.gate_partition`.
* :func:`make_group_func` -- ``applyInPandasWithState`` keyed by ``(substream, shard)``: runs
  :func:`~spark_ext.tracked.runner.run_group`, passes report and late rows through.

Why two different state APIs: Spark refuses two ``applyInPandasWithState`` in one query, and
accepts a ``transformWithStateInPandas`` before one (measured on Spark 4.2).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pandas as pd
from pyspark.sql.streaming.stateful_processor import (
    StatefulProcessor,
    StatefulProcessorHandle,
    TimerValues,
)
from pyspark.sql.types import LongType, StructField, StructType

from spark_ext.crash import declare
from spark_ext.operators.base import Group, SubstreamOperator
from spark_ext.sinks.task import stream_batch_id
from spark_ext.tracked.envelope import (
    GATE_STAGE,
    KIND_REPORT,
    KIND_RESULT,
    LATE_GROUP,
    REPORTS_GROUP,
    conform,
)
from spark_ext.tracked.gate import NO_FRONTIER, GateConfig, gate_partition
from spark_ext.tracked.runner import GroupState, late_output, run_group
from spark_ext.tracker.reports import ReportBuilder

_FRONTIER_SCHEMA = StructType([StructField("frontier", LongType())])


#: Fault point of the gate: a gate task's rows went out, its report not yet. A ``raise`` here
#: (attempt 0 only) is a task retried after its data left: Spark discards the failed attempt's
#: output, report rows included, and the retry must give the same windows.
GATE_EMITTED = declare("tracked.gate.emitted", "executor", "gate rows sent, report not yet")


def task_partition() -> int:
    """The Spark partition id of the running task (0 outside a task)."""
    from pyspark import TaskContext

    ctx = TaskContext.get()
    return ctx.partitionId() if ctx is not None else 0


def report_row(report_json: str, shard: int, columns: list[str]) -> pd.DataFrame:
    """One report row in the gate's envelope."""
    frame = pd.DataFrame(
        {
            "substream": [REPORTS_GROUP],
            "shard": [shard],
            "kind": [KIND_REPORT],
            "report": [report_json],
        }
    )
    return conform(frame, columns)


class GateProcessor(StatefulProcessor):
    """The gate of one source partition (state: its frontier). See :mod:`spark_ext.tracked.gate`."""

    def __init__(
        self, cfg: GateConfig, input_columns: list[str], envelope_columns: list[str]
    ) -> None:
        self.cfg = cfg
        self.inputs = input_columns
        self.columns = envelope_columns

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.frontier = handle.getValueState("frontier", _FRONTIER_SCHEMA)

    def handleInputRows(
        self, key: Any, rows: Iterator[pd.DataFrame], timerValues: TimerValues
    ) -> Iterator[pd.DataFrame]:
        part = task_partition()
        builder = ReportBuilder(GATE_STAGE, part)
        pdf = pd.concat(list(rows), ignore_index=True)
        if list(pdf.columns) != self.inputs:  # Spark 4.2 hands them over as _0, _1, ...
            pdf.columns = self.inputs
        before = self.frontier.get()
        frontier = int(before[0]) if before is not None else NO_FRONTIER
        frames, new = gate_partition(pdf, frontier, self.cfg, builder)
        if new != frontier:
            self.frontier.update((new,))
        for f in frames:
            yield conform(f, self.columns)
        GATE_EMITTED.reached(stream_batch_id())  # data rows out, report not yet
        report = builder.build()
        if not report.is_empty():
            yield report_row(report.to_json(), part % self.cfg.shards, self.columns)

    def close(self) -> None:
        pass


def make_group_func(
    operator: SubstreamOperator,
    forward_namespace: str | None,
    dedup: bool,
    columns: list[str],
) -> Callable[[Any, Iterator[pd.DataFrame], Any], Iterator[pd.DataFrame]]:
    """The executor side of the operator stage (one call per group per batch)."""
    inputs = list(operator.input_columns)

    def func(key: Any, frames: Iterator[pd.DataFrame], state: Any) -> Iterator[pd.DataFrame]:
        substream, shard = str(key[0]), int(key[1])
        rows = pd.concat(list(frames), ignore_index=True)
        if substream == REPORTS_GROUP:
            yield conform(pd.DataFrame({"kind": KIND_REPORT, "report": rows["report"]}), columns)
            return
        if substream == LATE_GROUP:
            yield late_output(rows, inputs, columns)
            return
        gstate = GroupState.from_json(state.get[0] if state.exists else None)
        out = run_group(
            operator,
            Group(substream, shard),
            gstate,
            rows,
            task_partition(),
            forward_namespace,
            dedup,
        )
        if gstate.changed or gstate.op.changed:
            if gstate.removed:
                state.remove()
            else:
                state.update((gstate.to_json(),))
        if out.results is not None and len(out.results):
            yield conform(out.results.assign(kind=KIND_RESULT, report=None), columns)
        if out.late is not None and len(out.late):
            yield late_output(out.late, inputs, columns)
        if not out.report.is_empty():
            yield conform(
                pd.DataFrame({"kind": [KIND_REPORT], "report": [out.report.to_json()]}), columns
            )

    return func
