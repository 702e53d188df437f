"""Run an operator in memory, without Spark: a fast harness for unit tests.

Like PySpark's ``tws_tester.py``: it calls the same code Spark runs per group
(:func:`~spark_ext.operators.runner.run_group`) with the same envelope and the same
``(event_time, label)`` ordering, keeping each group's state as JSON in a dict.

Supported: data rows, end signals (fanned out to every shard like the real trigger), the
operator's XOR reports. Not supported: the assign stage's Spark plumbing (labels are given
or derived from a row counter), timeouts, several batches in parallel.

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

import numpy as np
import pandas as pd

from spark_ext.operators.base import Group, OperatorState, SubstreamOperator
from spark_ext.operators.runner import ALL_SUBSTREAMS, KIND_DATA, KIND_END, run_group
from spark_ext.tracker.labels import key_hashes, labels_of
from spark_ext.tracker.reports import TaskReport
from spark_ext.tracker.substreams import Substream, Windowing


class OperatorTester:
    """Feed rows and end signals to ``operator`` as the tracked pipeline would."""

    def __init__(self, operator: SubstreamOperator, windowing: Windowing, shards: int = 2) -> None:
        self.operator = operator
        self.windowing = windowing
        self.shards = shards
        self.states: dict[tuple[str, int], str] = {}
        self.reports: list[TaskReport] = []
        self._seq = 0
        self._offset = 0

    def _group_of(self, tracked: str) -> str:
        return tracked if self.operator.per_substream else ALL_SUBSTREAMS

    def add(self, rows: Iterable[Mapping[str, Any]]) -> pd.DataFrame:
        """One batch of data rows (``key``, ``event_time_ms``, optional ``label``/``side``
        and the operator's input columns); returns what the operator emitted."""
        frame = pd.DataFrame(list(rows))
        if frame.empty:
            return self.operator.empty_output()
        if "label" not in frame:
            offs = np.arange(self._offset, self._offset + len(frame))
            frame["label"] = labels_of(["tester"] * len(frame), np.zeros(len(frame)), offs)
        self._offset += len(frame)
        if "side" not in frame:
            frame["side"] = ""
        idx, starts, ends = self.windowing.assign(frame["event_time_ms"].to_numpy(dtype=np.int64))
        env = frame.iloc[idx].reset_index(drop=True)
        env["tracked"] = [
            Substream(self.windowing.namespace, int(s), int(e)).id
            for s, e in zip(starts, ends, strict=True)
        ]
        env["start_ms"], env["end_ms"], env["kind"] = starts, ends, KIND_DATA
        env["key"] = env["key"].astype(str)
        shard = key_hashes(env["key"]) % np.uint64(self.shards)
        env["shard"] = shard.astype(int)
        env["substream"] = [self._group_of(t) for t in env["tracked"]]
        outs = [
            self._call(g, s, part)
            for (g, s), part in env.groupby(["substream", "shard"], sort=True)
        ]
        return self._concat(outs)

    def end(self, substream: str) -> pd.DataFrame:
        """The tracker ended ``substream``: one control row to each shard of its groups."""
        self._seq += 1
        sub = Substream.parse(substream)
        outs = []
        for shard in range(self.shards):
            ctrl = pd.DataFrame(
                {
                    "kind": [KIND_END],
                    "tracked": [substream],
                    "start_ms": [sub.start_ms],
                    "end_ms": [sub.end_ms],
                    "label": [self._seq],
                    "event_time_ms": [None],
                }
            )
            outs.append(self._call(self._group_of(substream), shard, ctrl))
        return self._concat(outs)

    def _call(self, substream: str, shard: int, rows: pd.DataFrame) -> pd.DataFrame | None:
        key = (substream, int(shard))
        state = OperatorState.from_json(self.states.get(key))
        out = run_group(self.operator, Group(*key), state, rows.reset_index(drop=True), int(shard))
        if state.changed:
            if state.removed:
                self.states.pop(key, None)
            else:
                self.states[key] = state.to_json()
        self.reports.append(out.report)
        return out.results

    def _concat(self, outs: list[pd.DataFrame | None]) -> pd.DataFrame:
        frames = [o for o in outs if o is not None and len(o)]
        if not frames:
            return self.operator.empty_output()
        return pd.concat(frames, ignore_index=True)

    def state_groups(self) -> int:
        """How many groups hold state (the state-size metric)."""
        return len(self.states)
