"""Stream-stream equi-join within a window, its state pruned when the window ends.

Both sides in one tracked stream with a ``side`` column (docs/design.md, "Operators").
"""

from __future__ import annotations

from typing import Any

import pandas as pd
from pyspark.sql.types import LongType, StringType, StructField, StructType

from spark_ext.errors import ConfigError
from spark_ext.operators.base import Group, OperatorState, SubstreamOperator
from spark_ext.tracker.agent import EndEvent

__all__ = ["WindowJoin"]


class WindowJoin(SubstreamOperator):
    """Inner or left (``how``) join of the two sides on key, per window; ``left_columns`` and
    ``right_columns`` are carried to the output as ``left_<c>`` and ``right_<c>``."""

    per_substream = True

    def __init__(
        self, left_columns: tuple[str, ...], right_columns: tuple[str, ...], how: str = "inner"
    ) -> None:
        if how not in ("inner", "left"):
            raise ConfigError("WindowJoin.how", f"must be 'inner' or 'left', got {how!r}")
        self.how = how
        self.left_columns = tuple(left_columns)
        self.right_columns = tuple(right_columns)
        self.input_columns = tuple(sorted(set(self.left_columns) | set(self.right_columns)))
        self.output_schema = StructType([])

    def bind(self, input_schema: StructType) -> None:
        types = {f.name: f.dataType for f in input_schema}
        missing = [c for c in self.input_columns if c not in types]
        if missing:
            raise ConfigError("WindowJoin.columns", f"not in the input: {missing}")
        self.output_schema = StructType(
            [
                StructField("window_start_ms", LongType()),
                StructField("window_end_ms", LongType()),
                StructField("key", StringType()),
                StructField("left_time_ms", LongType()),
                StructField("right_time_ms", LongType()),
                *[StructField(f"left_{c}", types[c]) for c in self.left_columns],
                *[StructField(f"right_{c}", types[c]) for c in self.right_columns],
            ]
        )

    def _record(self, row: Any, side: str) -> dict[str, Any]:
        cols = self.left_columns if side == "left" else self.right_columns
        rec: dict[str, Any] = {"t": int(row["event_time_ms"]), "m": False}
        for c in cols:
            v = row[c]
            rec[c] = None if pd.isna(v) else (v.item() if hasattr(v, "item") else v)
        return rec

    def _pair(
        self, group_start: int, group_end: int, key: str, left: Any, right: Any
    ) -> dict[str, Any]:
        out = {
            "window_start_ms": group_start,
            "window_end_ms": group_end,
            "key": key,
            "left_time_ms": left["t"],
            "right_time_ms": right["t"] if right else None,
        }
        for c in self.left_columns:
            out[f"left_{c}"] = left[c]
        for c in self.right_columns:
            out[f"right_{c}"] = right[c] if right else None
        return out

    def process(
        self, group: Group, state: OperatorState, rows: pd.DataFrame
    ) -> pd.DataFrame | None:
        # state: {"left": {key: [rec...]}, "right": {key: [rec...]}}
        st: dict[str, dict[str, list[dict[str, Any]]]] = state.get({"left": {}, "right": {}})
        out: list[dict[str, Any]] = []
        start, end = int(rows["start_ms"].iloc[0]), int(rows["end_ms"].iloc[0])
        for _, row in rows.iterrows():
            side = str(row["side"])
            if side not in ("left", "right"):
                raise ConfigError("WindowJoin.side", f"row with side {side!r}")
            other = "right" if side == "left" else "left"
            key = str(row["key"])
            rec = self._record(row, side)
            for o in st[other].get(key, []):
                o["m"] = True
                rec["m"] = True
                left, right = (rec, o) if side == "left" else (o, rec)
                out.append(self._pair(start, end, key, left, right))
            st[side].setdefault(key, []).append(rec)
        state.update(st)
        return pd.DataFrame(out) if out else None

    def flush(self, group: Group, state: OperatorState, end: EndEvent) -> pd.DataFrame | None:
        st = state.get({"left": {}, "right": {}})
        state.remove()
        if self.how != "left":
            return None
        out = [
            self._pair(end.start_ms, end.end_ms, key, rec, None)
            for key in sorted(st["left"])
            for rec in st["left"][key]
            if not rec["m"]
        ]
        return pd.DataFrame(out) if out else None
