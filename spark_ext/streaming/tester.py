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
import pyarrow as pa
from pyspark.sql.pandas.types import from_arrow_schema

from spark_ext.operators.base import SubstreamOperator
from spark_ext.streaming.batch import BatchState, run_batch, source_frame
from spark_ext.streaming.envelope import OPERATOR_STAGE, StageConfig
from spark_ext.tracker.agent import EndEvent, TrackerState
from spark_ext.tracker.reports import TaskReport, batch_reports
from spark_ext.tracker.substreams import Substream, Windowing

__all__ = ["OperatorTester", "PipelineTester"]


class OperatorTester:
    """Feed rows and end signals to ``operator`` as the tracked pipeline would (gate, shards,
    one batch a call), ended by :meth:`end` alone."""

    def __init__(self, operator: SubstreamOperator, windowing: Windowing, shards: int = 2) -> None:
        self.operator = operator
        self.cfg = StageConfig(operator, windowing, shards, None, frozenset(), False, None)
        self.state = BatchState()
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
        self.operator.bind(from_arrow_schema(pa.Schema.from_pandas(frame, preserve_index=False)))
        return self._run(source_frame(frame, self.operator.input_columns), [])

    def end(self, substream: str) -> pd.DataFrame:
        """The tracker ended ``substream``: one control row to each shard of its groups."""
        self._seq += 1
        sub = Substream.parse(substream)
        return self._run(pd.DataFrame(), [EndEvent(self._seq, substream, sub.start_ms, sub.end_ms)])

    def _run(self, src: pd.DataFrame, ends: list[EndEvent]) -> pd.DataFrame:
        out = run_batch(self.cfg, self.state, src, ends)
        self.reports += [r for r in out.reports if r.stage == OPERATOR_STAGE]
        return out.results if len(out.results) else self.operator.empty_output()

    def state_groups(self) -> int:
        """How many groups hold state (the state-size metric)."""
        return sum(len(s.groups) for s in self.state.stores.values())


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
        self.query = query
        sources = frozenset(closing.sources)
        self.cfg = StageConfig(
            operator, windowing, shards, closing.disorder_ms, sources, upstream, forward_namespace
        )
        self.agent = agent if agent is not None else TrackerState()
        self.agent.declare(windowing.namespace, closing.sources)
        #: The gate frontiers and each operator shard's state (groups, frontiers, released).
        self.state = BatchState()
        self.pending: list[EndEvent] = []  # the end events the last batch's reports caused
        self.batch = 0

    def run_batch(self, rows: Iterable[Mapping[str, Any]]) -> tuple[pd.DataFrame, pd.DataFrame]:
        """One micro-batch of source rows (``partition``, ``offset``, ``key``, ``event_time_ms``;
        optional ``topic``, ``close``, ``side``, ``fwd_*``, input columns): (results, late); the
        batch's reports are applied as the driver would."""
        frame = pd.DataFrame(list(rows))
        src = source_frame(frame, self.operator.input_columns) if len(frame) else frame
        ends = [e for e in self.pending if e.namespace == self.cfg.windowing.namespace]
        out = run_batch(self.cfg, self.state, src, ends)
        accepted = self.agent.accept(batch_reports(self.query, self.batch, out.reports))
        self.pending = self.agent.settle() if accepted else []
        self.batch += 1
        if not len(out.results):
            return self.operator.empty_output(), out.late
        return out.results, out.late

    @property
    def groups(self) -> dict[tuple[str, int], str]:
        """Every operator group still holding state: ``(group id, shard) -> state JSON``."""
        return {
            (gid, shard): blob
            for shard, store in sorted(self.state.stores.items())
            for gid, blob in sorted(store.groups.items())
        }
