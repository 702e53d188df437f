"""EWMA: an exponentially weighted moving average per key, in event-time order.

Rows are held until their bucket ends, then folded in ``(event_time, label)`` order
(docs/design.md, "Operators"); :func:`ewma` is the pure fold.

Example
-------
>>> ewma([1.0, 1.0, 4.0], alpha=0.5).tolist()
[1.0, 1.0, 2.5]
>>> ewma([4.0], alpha=0.5, initial=2.0).tolist()
[3.0]
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt
import pandas as pd
from pyspark.sql.types import DoubleType, LongType, StringType, StructField, StructType

from spark_ext.errors import ConfigError
from spark_ext.operators.base import Group, OperatorState, SubstreamOperator
from spark_ext.tracker.agent import EndEvent

__all__ = ["EwmaOperator", "ewma"]


def ewma(
    values: Sequence[float] | npt.ArrayLike, alpha: float, initial: float | None = None
) -> npt.NDArray[np.float64]:
    """Running EWMA ``m = alpha * x + (1 - alpha) * m`` over ``values`` in the given order.

    The first value seeds the average unless ``initial`` (the average so far) is given.
    """
    if not 0.0 < alpha <= 1.0:
        raise ConfigError("ewma.alpha", f"must be in (0, 1], got {alpha}")
    xs = np.asarray(values, dtype=np.float64)
    out = np.empty_like(xs)
    m = initial
    for i, x in enumerate(xs):
        m = x if m is None else alpha * x + (1.0 - alpha) * m
        out[i] = m
    return out


class EwmaOperator(SubstreamOperator):
    """Per-key EWMA of ``column``, emitted per element once its bucket has ended."""

    per_substream = False

    def __init__(self, column: str, alpha: float) -> None:
        ewma([], alpha)  # validates alpha
        self.column = column
        self.alpha = alpha
        self.input_columns = (column,)
        self.output_schema = StructType(
            [
                StructField("key", StringType()),
                StructField("event_time_ms", LongType()),
                StructField("label", LongType()),
                StructField("value", DoubleType()),
                StructField("ewma", DoubleType()),
            ]
        )

    def process(
        self, group: Group, state: OperatorState, rows: pd.DataFrame
    ) -> pd.DataFrame | None:
        st: dict[str, Any] = state.get({"avg": {}, "pending": []})
        st["pending"].extend(
            [str(k), int(t), int(lbl), float(v)]
            for k, t, lbl, v in zip(
                rows["key"], rows["event_time_ms"], rows["label"], rows[self.column], strict=True
            )
        )
        state.update(st)
        return None

    def flush(self, group: Group, state: OperatorState, end: EndEvent) -> pd.DataFrame | None:
        st: dict[str, Any] = state.get({"avg": {}, "pending": []})
        ready = sorted(p for p in st["pending"] if p[1] < end.end_ms)
        if not ready:
            return None
        st["pending"] = [p for p in st["pending"] if p[1] >= end.end_ms]
        frame = pd.DataFrame(ready, columns=["key", "event_time_ms", "label", "value"])
        parts = []
        for key, part in frame.groupby("key", sort=True):
            part = part.sort_values(["event_time_ms", "label"])
            seq = ewma(part["value"], self.alpha, st["avg"].get(str(key)))
            st["avg"][str(key)] = float(seq[-1])
            parts.append(part.assign(ewma=seq))
        state.update(st)
        return pd.concat(parts, ignore_index=True)
