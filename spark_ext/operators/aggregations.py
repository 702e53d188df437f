"""Aggregations of a window: count, sum, mean, max and a user function.

Accumulators (``init``/``add``/``merge``/``result``) over JSON-able values; a user function
sees its values in ``(event_time_ms, label)`` order.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from pyspark.sql.types import DataType, DoubleType, LongType, StringType, StructField, StructType

__all__ = ["Aggregation", "Count", "Max", "Mean", "Sum", "UserFunction", "columns_of"]


class Aggregation(ABC):
    """One output column computed from the rows of a window."""

    name: str
    column: str | None
    data_type: DataType

    @abstractmethod
    def init(self) -> Any: ...

    @abstractmethod
    def add(self, acc: Any, values: np.ndarray) -> Any: ...

    @abstractmethod
    def merge(self, a: Any, b: Any) -> Any: ...

    def result(self, acc: Any) -> Any:
        return acc

    def __post_init__(self) -> None:
        if not self.name:  # Sum("x") is named "sum_x"
            object.__setattr__(self, "name", f"{type(self).__name__.lower()}_{self.column}")


@dataclass(frozen=True)
class Count(Aggregation):
    name: str = "count"
    column: str | None = None
    data_type: DataType = field(default_factory=LongType)

    def init(self) -> int:
        return 0

    def add(self, acc: int, values: np.ndarray) -> int:
        return acc + len(values)

    def merge(self, a: int, b: int) -> int:
        return a + b


@dataclass(frozen=True)
class _OfColumn(Aggregation):
    """A floating-point aggregation of ``column``, named ``<kind>_<column>`` by default."""

    column: str | None = None
    name: str = ""
    data_type: DataType = field(default_factory=DoubleType)


@dataclass(frozen=True)
class Sum(_OfColumn):
    def init(self) -> float:
        return 0.0

    def add(self, acc: float, values: np.ndarray) -> float:
        return acc + float(np.sum(values.astype(float)))

    def merge(self, a: float, b: float) -> float:
        return a + b


@dataclass(frozen=True)
class Mean(_OfColumn):
    def init(self) -> list[float]:
        return [0.0, 0]

    def add(self, acc: list[float], values: np.ndarray) -> list[float]:
        return [acc[0] + float(np.sum(values.astype(float))), acc[1] + len(values)]

    def merge(self, a: list[float], b: list[float]) -> list[float]:
        return [a[0] + b[0], a[1] + b[1]]

    def result(self, acc: list[float]) -> float | None:
        return acc[0] / acc[1] if acc[1] else None


@dataclass(frozen=True)
class Max(_OfColumn):
    def init(self) -> float | None:
        return None

    def add(self, acc: float | None, values: np.ndarray) -> float | None:
        if len(values) == 0:
            return acc
        m = float(np.max(values.astype(float)))
        return m if acc is None else max(acc, m)

    def merge(self, a: float | None, b: float | None) -> float | None:
        return b if a is None else a if b is None else max(a, b)


@dataclass(frozen=True)
class UserFunction(Aggregation):
    """``fn(values in (event time, label) order) -> value``; keeps the window's values in state."""

    name: str = "udf"
    column: str | None = None
    fn: Callable[[Sequence[Any]], Any] = len
    data_type: DataType = field(default_factory=DoubleType)

    def init(self) -> list[Any]:
        return []

    def add(self, acc: list[Any], values: np.ndarray) -> list[Any]:
        return acc + [v.item() if hasattr(v, "item") else v for v in values]

    def merge(self, a: list[Any], b: list[Any]) -> list[Any]:
        return a + b

    def result(self, acc: list[Any]) -> Any:
        return self.fn(acc)


def columns_of(
    span: str, aggregations: Sequence[Aggregation]
) -> tuple[tuple[str, ...], StructType]:
    """The input columns ``aggregations`` read, and the output schema: ``<span>_start_ms``,
    ``<span>_end_ms``, ``key``, then one column per aggregation."""
    fields = [StructField(f"{span}_{end}_ms", LongType()) for end in ("start", "end")]
    fields += [StructField("key", StringType())]
    fields += [StructField(a.name, a.data_type) for a in aggregations]
    return tuple(sorted({a.column for a in aggregations if a.column})), StructType(fields)
