"""Session windows: a key's elements closer than ``gap`` apart form one session.

Grouped by shard; ended by the tracker's buckets (docs/design.md, "Operators").
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from spark_ext.operators.aggregations import Aggregation, columns_of
from spark_ext.operators.base import Group, OperatorState, SubstreamOperator
from spark_ext.tracker.agent import EndEvent
from spark_ext.tracker.substreams import duration_ms

__all__ = ["SessionWindow"]


class SessionWindow(SubstreamOperator):
    """Per-key sessions separated by at least ``gap`` of event time, with aggregations."""

    per_substream = False

    def __init__(self, gap: int | str, *aggregations: Aggregation) -> None:
        self.gap_ms = duration_ms(gap, "SessionWindow.gap")
        self.aggregations = aggregations
        self.input_columns, self.output_schema = columns_of("session", aggregations)

    def process(
        self, group: Group, state: OperatorState, rows: pd.DataFrame
    ) -> pd.DataFrame | None:
        # state: key -> list of [first_ms, last_ms, accs], sorted by first_ms, disjoint
        sessions: dict[str, list[list[Any]]] = state.get({})
        for key, part in rows.groupby("key", sort=True):
            k = str(key)
            current = sessions.get(k, [])
            for _, row in part.iterrows():
                t = int(row["event_time_ms"])
                accs = [
                    a.add(a.init(), pd.Series([row[a.column] if a.column else 1]).to_numpy())
                    for a in self.aggregations
                ]
                current = self._insert(current, [t, t, accs])
            sessions[k] = current
        state.update(sessions)
        return None

    def _insert(self, sessions: list[list[Any]], new: list[Any]) -> list[list[Any]]:
        merged = new
        keep = []
        for s in sessions:
            if s[0] - self.gap_ms < merged[1] and merged[0] < s[1] + self.gap_ms:
                merged = [
                    min(s[0], merged[0]),
                    max(s[1], merged[1]),
                    [
                        a.merge(x, y)
                        for a, x, y in zip(self.aggregations, s[2], merged[2], strict=True)
                    ],
                ]
            else:
                keep.append(s)
        keep.append(merged)
        return sorted(keep, key=lambda s: s[0])

    def flush(self, group: Group, state: OperatorState, end: EndEvent) -> pd.DataFrame | None:
        sessions: dict[str, list[list[Any]]] = state.get({})
        rows: list[dict[str, Any]] = []
        for k in sorted(sessions):
            still = []
            for s in sessions[k]:
                if s[1] + self.gap_ms <= end.end_ms:
                    row = {"session_start_ms": s[0], "session_end_ms": s[1] + self.gap_ms, "key": k}
                    for a, acc in zip(self.aggregations, s[2], strict=True):
                        row[a.name] = a.result(acc)
                    rows.append(row)
                else:
                    still.append(s)
            sessions[k] = still
        sessions = {k: v for k, v in sessions.items() if v}
        if sessions:
            state.update(sessions)
        else:
            state.remove()
        return pd.DataFrame(rows) if rows else None
