"""The fold behind an ordering buffer: what :func:`~spark_ext.ordering.order_and_fold` applies
(an example: README, "Deterministic ordering and dedup")."""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any, ClassVar

import pandas as pd
from pyspark.sql.types import StructField

__all__ = ["FoldState", "KeyedFold"]

#: Per-key fold state of one shard: key -> a JSON-able value.
FoldState = dict[str, Any]


class KeyedFold(ABC):
    """An order-sensitive fold per key over released elements in the total order
    (docs/design.md, "Ordering"); subclasses set :attr:`fields`, implement :meth:`fold`, and
    must be picklable."""

    #: The columns the fold adds to every output row, after ``value``.
    fields: ClassVar[tuple[StructField, ...]] = ()

    def describe(self, elements: pd.DataFrame) -> pd.DataFrame:
        """State-free columns of any element, also of late and duplicate ones (which are not
        folded); a subset of :attr:`fields`. Default: none (they are null for such rows)."""
        return pd.DataFrame(index=elements.index)

    @abstractmethod
    def fold(self, state: FoldState, elements: pd.DataFrame) -> pd.DataFrame:
        """Fold ``elements`` (columns ``key``, ``record_id``, ``value``, ``event_time_ms``,
        ``topic``, ``partition``, ``offset``, in the total order) into ``state`` (updated in
        place); return the :attr:`fields` columns per element, with ``elements``' index."""

    def drop(self, state: FoldState, key: str) -> None:
        """The key's substream ended: forget its state (default: remove the key)."""
        state.pop(key, None)
