"""The pure ordering buffer of one shard (pandas, no Spark): offer, observe progress, release
in the total order, hand back late elements (docs/design.md, "Ordering")."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from spark_ext.ordering.errors import OrderingBufferFull

__all__ = [
    "CLOSED",
    "ELEMENT_COLUMNS",
    "ORDER_COLUMNS",
    "OrderingBuffer",
    "Released",
    "partition_id",
]

#: Progress of a closed partition: past every event time.
CLOSED = np.iinfo(np.int64).max

#: Columns the buffer holds per element, in this order, with their dtypes; the first four: t(x).
_DTYPES = {
    "event_time_ms": "int64",
    "topic": "object",
    "partition": "int64",
    "offset": "int64",
    "key": "object",
    "record_id": "object",
    "value": "float64",
}
ELEMENT_COLUMNS = tuple(_DTYPES)
ORDER_COLUMNS = list(ELEMENT_COLUMNS[:4])


def partition_id(topic: str, partition: int) -> str:
    return f"{topic}/{int(partition)}"


def _empty_elements() -> pd.DataFrame:
    return pd.DataFrame({c: pd.Series(dtype=t) for c, t in _DTYPES.items()})


@dataclass
class Released:
    """What one :meth:`OrderingBuffer.release` gave: in-order elements and late ones."""

    in_order: pd.DataFrame
    late: pd.DataFrame
    ended_keys: list[str]


@dataclass
class OrderingBuffer:
    """The pure buffer of one shard: offer elements and progress (of ``partitions``, ids
    ``"topic/partition"``), release in total order (not ``buffered``: in arrival order)."""

    partitions: tuple[str, ...]
    buffered: bool = True
    max_rows: int = 1_000_000
    elements: pd.DataFrame = field(default_factory=_empty_elements)
    progress: dict[str, int] = field(default_factory=dict)
    released_below: int | None = None
    _late: list[pd.DataFrame] = field(default_factory=list)
    _ended: list[str] = field(default_factory=list)

    @property
    def frontier(self) -> int | None:
        """Minimum progress over every partition; ``None`` until each has reported."""
        if any(p not in self.progress for p in self.partitions):
            return None
        return min(self.progress[p] for p in self.partitions)

    def offer(self, rows: pd.DataFrame) -> None:
        """Add elements (columns :data:`ELEMENT_COLUMNS`), arrival order preserved."""
        if rows.empty:
            return
        rows = rows.loc[:, list(ELEMENT_COLUMNS)]
        if self.buffered and self.released_below is not None:
            late = rows["event_time_ms"] < self.released_below
            if late.any():
                self._late.append(rows[late])
                rows = rows[~late]
        self.elements = pd.concat([self.elements, rows], ignore_index=True)
        if self.buffered and len(self.elements) > self.max_rows:
            raise OrderingBufferFull(
                f"{len(self.elements)} elements buffered (max {self.max_rows}); "
                f"progress {self.progress}"
            )

    def observe(self, topic: str, partition: int, event_time_ms: int) -> None:
        """A partition's progress: it will send nothing with an earlier event time."""
        pid = partition_id(topic, partition)
        self.progress[pid] = max(self.progress.get(pid, event_time_ms), int(event_time_ms))

    def end(self, key: str) -> None:
        """The key's substream ended (tracker end event): release all of it now."""
        self._ended.append(key)

    def release(self) -> Released:
        """Elements whose order is ensured, sorted by t(x); late elements; ended keys."""
        late = (
            pd.concat(self._late, ignore_index=True).sort_values(ORDER_COLUMNS, kind="mergesort")
            if self._late
            else _empty_elements()
        )
        self._late = []
        ended, self._ended = self._ended, []
        if not self.buffered:
            out, self.elements = self.elements, _empty_elements()
            return Released(out.reset_index(drop=True), late, ended)
        frontier = self.frontier
        ready = self.elements["key"].isin(ended)
        if frontier is not None:
            ready |= self.elements["event_time_ms"] < frontier
            if self.released_below is None or frontier > self.released_below:
                self.released_below = frontier
        out = self.elements[ready].sort_values(ORDER_COLUMNS, kind="mergesort")
        self.elements = self.elements[~ready].reset_index(drop=True)
        return Released(out.reset_index(drop=True), late.reset_index(drop=True), ended)

    def to_json(self) -> dict[str, Any]:
        return {
            "progress": self.progress,
            "released_below": self.released_below,
            "elements": self.elements.astype(object).values.tolist(),
        }

    def load_json(self, data: dict[str, Any]) -> None:
        self.progress = {k: int(v) for k, v in data["progress"].items()}
        self.released_below = data["released_below"]
        rows = data["elements"]
        if rows:
            self.elements = pd.DataFrame(rows, columns=list(ELEMENT_COLUMNS)).astype(_DTYPES)
