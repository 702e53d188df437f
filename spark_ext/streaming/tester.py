"""Run an operator or a whole tracked query in memory, without Spark (fast unit tests), like
PySpark's ``tws_tester.py``: the same per-group code, envelope and ordering as the Spark stages.
Not modelled: Spark's plumbing, task retries and checkpoint recovery (the Spark tests cover them).

Example
-------
>>> t = OperatorTester(WindowAggregate(Count()), Tumbling("10 seconds", namespace="w"))
>>> t.add([{"key": "a", "event_time_ms": 1_000}, {"key": "a", "event_time_ms": 2_000}])
>>> t.end("w/0/10000")["count"].tolist()
[2]
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import pandas as pd

from spark_ext.operators.base import Group, SubstreamOperator
from spark_ext.streaming.batch import BatchState, run_batch, source_frame
from spark_ext.streaming.envelope import (
    ALL_SUBSTREAMS,
    GATE_STAGE,
    KIND_DATA,
    StageConfig,
    end_rows,
)
from spark_ext.streaming.gate import NO_FRONTIER, gate_partition
from spark_ext.streaming.shard import DictStore, run_stored
from spark_ext.tracker.agent import EndEvent, TrackerState
from spark_ext.tracker.reports import ReportBuilder, TaskReport, batch_reports
from spark_ext.tracker.substreams import Substream, Windowing

__all__ = ["OperatorTester", "PipelineTester"]


class OperatorTester:
    """Feed rows and end signals to ``operator`` as the tracked pipeline would (the gate's
    assignment, the shards' per-group calls), ended by :meth:`end` alone."""

    def __init__(self, operator: SubstreamOperator, windowing: Windowing, shards: int = 2) -> None:
        self.operator = operator
        self.cfg = StageConfig(operator, windowing, shards, None, frozenset(), False, None)
        self.stores: dict[int, DictStore] = {}
        #: The operator's task reports (the labels it finished).
        self.reports: list[TaskReport] = []
        self._seq = 0
        self._offset = 0

    def add(self, rows: Iterable[Mapping[str, Any]]) -> pd.DataFrame:
        """One batch of data rows (``key``, ``event_time_ms``, optional ``side`` and the
        operator's input columns; labelled by their offset); returns what the operator emitted."""
        frame = pd.DataFrame(list(rows))
        if frame.empty:
            return self.operator.empty_output()
        offsets = range(self._offset, self._offset + len(frame))
        self._offset += len(frame)
        frame = frame.assign(topic="tester", partition=0, offset=offsets)
        src = source_frame(frame, self.operator.input_columns)
        frames, _ = gate_partition(src, NO_FRONTIER, self.cfg, ReportBuilder(GATE_STAGE, 0))
        env = pd.concat(frames, ignore_index=True)
        groups = env[env["kind"] == KIND_DATA].groupby(["substream", "shard"], sort=True)
        return self._concat([self._call(g, int(s), part) for (g, s), part in groups])

    def end(self, substream: str) -> pd.DataFrame:
        """The tracker ended ``substream``: one control row to each shard of its groups."""
        self._seq += 1
        sub = Substream.parse(substream)
        ctrl = end_rows(substream, sub.start_ms, sub.end_ms, self._seq)
        group = substream if self.operator.per_substream else ALL_SUBSTREAMS
        return self._concat([self._call(group, shard, ctrl) for shard in range(self.cfg.shards)])

    def _call(self, substream: str, shard: int, rows: pd.DataFrame) -> pd.DataFrame | None:
        store = self.stores.setdefault(shard, DictStore())
        out = run_stored(
            self.cfg, store, Group(substream, shard), rows.reset_index(drop=True), shard
        )
        self.reports.append(out.report)
        return out.results

    def _concat(self, outs: list[pd.DataFrame | None]) -> pd.DataFrame:
        frames = [o for o in outs if o is not None and len(o)]
        return pd.concat(frames, ignore_index=True) if frames else self.operator.empty_output()

    def state_groups(self) -> int:
        """How many groups hold state (the state-size metric)."""
        return sum(len(s.groups) for s in self.stores.values())


class PipelineTester:
    """A whole tracked query in memory, batch by batch, wired as the Spark query is: gate,
    shards, the agent's pure state; a task is one source partition or one shard."""

    def __init__(
        self,
        operator: SubstreamOperator,
        windowing: Windowing,
        closing: Any,
        shards: int = 2,
        upstream: bool = False,
        forward_namespace: str | None = None,
        query: str = "q",
        agent: TrackerState | None = None,
    ) -> None:
        self.operator = operator
        self.windowing = windowing
        self.shards = shards
        self.forward_namespace = forward_namespace
        self.upstream = upstream
        self.query = query
        self.cfg = StageConfig(
            operator,
            windowing,
            shards,
            closing.disorder_ms,
            frozenset(closing.sources),
            upstream,
            forward_namespace,
        )
        self.agent = agent if agent is not None else TrackerState()
        self.agent.declare(windowing.namespace, closing.sources)
        #: The gate frontiers and each operator shard's state (groups, frontiers, released).
        self.state = BatchState()
        self.pending: list[EndEvent] = []
        self.batch = 0

    @property
    def stores(self) -> dict[int, DictStore]:
        return self.state.stores

    def run_batch(self, rows: Iterable[Mapping[str, Any]]) -> tuple[pd.DataFrame, pd.DataFrame]:
        """One micro-batch of source rows (``partition``, ``offset``, ``key``, ``event_time_ms``;
        optional ``topic``, ``close``, ``side``, ``fwd_*``, input columns): (results, late)."""
        frame = pd.DataFrame(list(rows))
        src = source_frame(frame, self.operator.input_columns) if len(frame) else frame
        ends = [e for e in self.pending if e.namespace == self.windowing.namespace]
        out = run_batch(self.cfg, self.state, src, ends)
        self.pending = self.agent_apply(out.reports)
        self.batch += 1
        if not len(out.results):
            return self.operator.empty_output(), out.late
        return out.results, out.late

    @property
    def groups(self) -> dict[tuple[str, int], str]:
        """Every operator group still holding state: ``(group id, shard) -> state JSON``."""
        return {
            (gid, shard): blob
            for shard, store in sorted(self.stores.items())
            for gid, blob in sorted(store.groups.items())
        }

    def agent_apply(self, reports: list[TaskReport]) -> list[EndEvent]:
        """Apply one batch's reports as the driver would; returns the end events caused."""
        keyed = batch_reports(self.query, self.batch, reports)
        if not self.agent.accept(keyed):
            return []
        return self.agent.settle()
