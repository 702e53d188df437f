"""Tumbling and sliding window aggregation, released when the tracker ends the window.

One group per (window, shard), an accumulator per key (docs/design.md, "Operators").

Example
-------
>>> op = WindowAggregate(Count(), Sum("amount"), Mean("amount"))
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from spark_ext.operators.aggregations import Aggregation, columns_of
from spark_ext.operators.base import Group, OperatorState, SubstreamOperator
from spark_ext.tracker.agent import EndEvent

__all__ = ["WindowAggregate"]


class WindowAggregate(SubstreamOperator):
    """One row per (window, key) with every aggregation, emitted when the window ends."""

    per_substream = True

    def __init__(self, *aggregations: Aggregation) -> None:
        if not aggregations:
            from spark_ext.errors import ConfigError

            raise ConfigError("WindowAggregate.aggregations", "give at least one aggregation")
        self.aggregations = aggregations
        self.input_columns, self.output_schema = columns_of("window", aggregations)

    def process(
        self, group: Group, state: OperatorState, rows: pd.DataFrame
    ) -> pd.DataFrame | None:
        accs: dict[str, list[Any]] = state.get({})
        # one pass per column: rows split by key on numpy arrays (no pandas groupby per window)
        codes, uniques = pd.factorize(rows["key"].astype(str), sort=True)
        order = np.argsort(codes, kind="stable")
        bounds = np.flatnonzero(np.r_[True, np.diff(codes[order]) != 0, True]).tolist()
        columns = {
            c: rows[c].to_numpy()[order] for c in {a.column or "label" for a in self.aggregations}
        }
        for i, k in enumerate(uniques.tolist()):
            a0, b0 = bounds[i], bounds[i + 1]
            acc = accs.get(k) or [a.init() for a in self.aggregations]
            accs[k] = [
                a.add(x, columns[a.column or "label"][a0:b0])
                for a, x in zip(self.aggregations, acc, strict=True)
            ]
        state.update(accs)
        return None

    def open_keys(self, value: Any) -> int:
        return len(value) if isinstance(value, dict) else 1

    def flush(self, group: Group, state: OperatorState, end: EndEvent) -> pd.DataFrame | None:
        accs: dict[str, list[Any]] = state.get({})
        state.remove()
        if not accs:
            return None
        keys = sorted(accs)
        out: dict[str, list[Any]] = {
            "window_start_ms": [end.start_ms] * len(keys),
            "window_end_ms": [end.end_ms] * len(keys),
            "key": keys,
        }
        for i, a in enumerate(self.aggregations):
            out[a.name] = [a.result(accs[k][i]) for k in keys]
        return pd.DataFrame(out)
