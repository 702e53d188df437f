"""The operator base class: per-group state, process rows, flush a substream on its end.

Groups, row order and end signals: docs/design.md, "Operators".

Example
-------
>>> class CountRows(SubstreamOperator):
...     output_schema = StructType([StructField("n", LongType())])
...     def process(self, group, state, rows):
...         state.update({"n": state.get({"n": 0})["n"] + len(rows)})
...         return None
...     def flush(self, group, state, end):
...         n = state.get({"n": 0})["n"]
...         state.remove()
...         return pd.DataFrame({"n": [n]})
"""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any

import pandas as pd
from pyspark.sql.types import StructType

from spark_ext.tracker.agent import EndEvent

__all__ = ["DATA_COLUMNS", "Group", "OperatorState", "SubstreamOperator"]

#: Columns every data row handed to an operator has (plus the operator's input columns).
DATA_COLUMNS = ("tracked", "start_ms", "end_ms", "key", "event_time_ms", "label", "side")


@dataclass(frozen=True)
class Group:
    """The grouping key of one operator call: a substream (or ``"*"``) and a shard."""

    substream: str
    shard: int


class OperatorState:
    """One group's state: a JSON-able value, read with :meth:`get`, written with :meth:`update`."""

    def __init__(self, value: Any = None) -> None:
        self._value = value
        self.removed = False
        self.changed = False

    @classmethod
    def from_json(cls, text: str | None) -> OperatorState:
        return cls(json.loads(text) if text else None)

    def exists(self) -> bool:
        return self._value is not None

    def get(self, default: Any = None) -> Any:
        return self._value if self._value is not None else default

    def update(self, value: Any) -> None:
        self._value = value
        self.removed = False
        self.changed = True

    def remove(self) -> None:
        self._value = None
        self.removed = True
        self.changed = True

    def to_json(self) -> str:
        return json.dumps(self._value, sort_keys=True, separators=(",", ":"))


class SubstreamOperator(ABC):
    """Base class of stateful operators flushed by substream end: subclasses set
    :attr:`output_schema` and implement :meth:`process` and :meth:`flush`."""

    #: Group by (substream, shard) when True, by ("*", shard) when False.
    per_substream: bool = True
    #: Result columns (without the pipeline's envelope columns).
    output_schema: StructType
    #: Input columns (besides key and event time) the operator reads.
    input_columns: tuple[str, ...] = ()

    def bind(self, input_schema: StructType) -> None:  # noqa: B027 (optional hook)
        """Resolve anything that depends on the input's types (default: nothing)."""

    @abstractmethod
    def process(
        self, group: Group, state: OperatorState, rows: pd.DataFrame
    ) -> pd.DataFrame | None:
        """Fold the data rows of ``group`` in this batch into ``state``; may emit rows."""

    @abstractmethod
    def flush(self, group: Group, state: OperatorState, end: EndEvent) -> pd.DataFrame | None:
        """``end.substream`` has ended: emit its results and drop the state it no longer needs."""

    def open_keys(self, value: Any) -> int:
        """How many (window, key) groups one group's state ``value`` holds open (the driver
        path's size measure, docs/design.md, "Tracked queries"); default 1."""
        return 1

    def empty_output(self) -> pd.DataFrame:
        return pd.DataFrame({f.name: pd.Series([], dtype=object) for f in self.output_schema})
