"""The executor side of a tracked query: the gate stage and the operator stage, both
``transformWithStateInPandas`` (why: docs/design.md, "Tracked queries")."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pandas as pd
from pyspark.sql.streaming.stateful_processor import (
    StatefulProcessor,
    StatefulProcessorHandle,
    TimerValues,
)
from pyspark.sql.types import LongType, StringType, StructField, StructType

from spark_ext.crash import declare
from spark_ext.sinks.task import stream_batch_id
from spark_ext.streaming.envelope import (
    GATE_STAGE,
    KIND_REPORT,
    REPORTS_GROUP,
    StageConfig,
    conform,
)
from spark_ext.streaming.gate import NO_FRONTIER, gate_partition
from spark_ext.streaming.shard import run_shard
from spark_ext.tracker.reports import TaskReport

__all__ = ["GATE_EMITTED", "GateProcessor", "OperatorProcessor", "task_partition"]

_FRONTIER_SCHEMA = StructType([StructField("frontier", LongType())])


#: A ``raise`` here is a task retried after its rows left (Spark discards the attempt's report).
GATE_EMITTED = declare("tracked.gate.emitted", "executor", "gate rows sent, report not yet")


def task_partition() -> int:
    """The Spark partition id of the running task (0 outside a task)."""
    from pyspark import TaskContext

    ctx = TaskContext.get()
    return ctx.partitionId() if ctx is not None else 0


class GateProcessor(StatefulProcessor):
    """The gate of one source partition (state: its frontier). See :mod:`spark_ext.streaming.gate`."""

    def __init__(
        self, cfg: StageConfig, input_columns: list[str], envelope_columns: list[str]
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
        report = TaskReport(GATE_STAGE, part)
        pdf = pd.concat(list(rows), ignore_index=True)
        if list(pdf.columns) != self.inputs:  # Spark 4.2 hands them over as _0, _1, ...
            pdf.columns = self.inputs
        before = self.frontier.get()
        frontier = int(before[0]) if before is not None else NO_FRONTIER
        frames, new = gate_partition(pdf, frontier, self.cfg, report)
        if new != frontier:
            self.frontier.update((new,))
        for f in frames:
            yield conform(f, self.columns)
        GATE_EMITTED.reached(stream_batch_id())  # data rows out, report not yet
        if not report.is_empty():
            row = {
                "substream": REPORTS_GROUP,
                "shard": part % self.cfg.shards,
                "kind": KIND_REPORT,
                "report": report.to_json(),
            }
            yield conform(pd.DataFrame([row]), self.columns)


_GROUP_KEY = StructType([StructField("group", StringType())])
_GROUP_VALUE = StructType([StructField("state", StringType())])
_SOURCE_KEY = StructType([StructField("source", StringType())])


class _TwsStore:
    """:class:`~spark_ext.streaming.shard.ShardStore` on two ``MapState``s (groups, frontiers)
    and a ``ValueState`` (the released frontier)."""

    def __init__(self, handle: StatefulProcessorHandle) -> None:
        self._groups = handle.getMapState("groups", _GROUP_KEY, _GROUP_VALUE)
        self._frontiers = handle.getMapState("frontiers", _SOURCE_KEY, _FRONTIER_SCHEMA)
        self._released = handle.getValueState("released", _FRONTIER_SCHEMA)
        self._known: dict[str, int] | None = None

    def begin(self) -> None:
        """A new call (another shard, or the next batch): forget the cached frontiers."""
        self._known = None

    def group(self, gid: str) -> str | None:
        if not self._groups.containsKey((gid,)):
            return None
        value = self._groups.getValue((gid,))
        return str(value[0]) if value is not None else None

    def put_group(self, gid: str, blob: str) -> None:
        self._groups.updateValue((gid,), (blob,))

    def drop_group(self, gid: str) -> None:
        self._groups.removeKey((gid,))

    def group_ids(self) -> list[str]:
        if not self._groups.exists():
            return []
        return [str(k[0]) for k in self._groups.keys()]

    def frontiers(self) -> dict[str, int]:
        if self._known is None:  # one state round trip per call, not one per use
            self._known = (
                {str(k[0]): int(v[0]) for k, v in self._frontiers.iterator()}
                if self._frontiers.exists()
                else {}
            )
        return dict(self._known)

    def put_frontier(self, source: str, frontier: int) -> None:
        self._frontiers.updateValue((source,), (frontier,))
        if self._known is not None:
            self._known[source] = frontier

    def released(self) -> int:
        v = self._released.get()
        return int(v[0]) if v is not None else NO_FRONTIER

    def put_released(self, through: int) -> None:
        self._released.update((through,))


class OperatorProcessor(StatefulProcessor):
    """The operator stage of one shard (see :mod:`spark_ext.streaming.shard`)."""

    def __init__(self, cfg: StageConfig, envelope_columns: list[str], keys: list[int]) -> None:
        self.cfg = cfg
        self.inputs = envelope_columns
        #: group key -> logical shard (:mod:`spark_ext.streaming.placement`)
        self.shard_of = {k: i for i, k in enumerate(keys)}

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.store = _TwsStore(handle)

    def handleInputRows(
        self, key: Any, rows: Iterator[pd.DataFrame], timerValues: TimerValues
    ) -> Iterator[pd.DataFrame]:
        pdf = pd.concat(list(rows), ignore_index=True)
        if list(pdf.columns) != self.inputs:  # Spark 4.2 hands them over as _0, _1, ...
            pdf.columns = self.inputs
        shard = self.shard_of[int(key[0])]
        self.store.begin()
        yield from run_shard(self.cfg, shard, pdf, self.store, task_partition())
