"""Substreams (``[start_ms, end_ms)`` of a namespace) and the windowings that assign elements to
them; sessions and EWMA track fixed buckets (docs/design.md, "Operators")."""

from __future__ import annotations

import re
from abc import ABC, abstractmethod
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from spark_ext.tracker.errors import ConfigError

__all__ = ["Sliding", "Substream", "Tumbling", "Windowing", "duration_ms"]

_UNITS_MS = {
    unit: ms
    for ms, units in [
        (1, "ms millisecond milliseconds"),
        (1000, "s sec second seconds"),
        (60_000, "m min minute minutes"),
        (3_600_000, "h hour hours"),
    ]
    for unit in units.split()
}


def duration_ms(value: int | str, setting: str = "duration") -> int:
    """``"10 seconds"``, ``"500ms"``, ``"1 minute"`` or an int (milliseconds) -> milliseconds."""
    if isinstance(value, int):
        ms = value
    else:
        m = re.fullmatch(r"\s*(\d+)\s*([a-zA-Z]+)\s*", value)
        if not m or m.group(2).lower() not in _UNITS_MS:
            raise ConfigError(setting, f"cannot read {value!r} as a duration (e.g. '10 seconds')")
        ms = int(m.group(1)) * _UNITS_MS[m.group(2).lower()]
    if ms <= 0:
        raise ConfigError(setting, f"must be positive, got {value!r}")
    return ms


@dataclass(frozen=True, order=True)
class Substream:
    """One tracked substream: the events of ``namespace`` with time in ``[start_ms, end_ms)``."""

    namespace: str
    start_ms: int
    end_ms: int

    @property
    def id(self) -> str:
        return f"{self.namespace}/{self.start_ms}/{self.end_ms}"

    @classmethod
    def parse(cls, substream_id: str) -> Substream:
        namespace, start, end = substream_id.rsplit("/", 2)
        return cls(namespace, int(start), int(end))


class Windowing(ABC):
    """A predicate family: which substreams an element with event time ``t`` belongs to."""

    namespace: str

    @abstractmethod
    def assign(
        self, times_ms: npt.NDArray[np.int64]
    ) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64], npt.NDArray[np.int64]]:
        """Vectorised assignment: ``(row_index, start_ms, end_ms)``, one entry per membership."""

    @abstractmethod
    def closed_before(self, frontier_ms: int) -> Substream | None:
        """The latest-ending substream that ends at or before ``frontier_ms``."""

    def substreams_of(self, time_ms: int) -> list[Substream]:
        """The substreams of one element, earliest first."""
        _, starts, ends = self.assign(np.asarray([time_ms], dtype=np.int64))
        return sorted(
            Substream(self.namespace, int(s), int(e)) for s, e in zip(starts, ends, strict=True)
        )


@dataclass(frozen=True)
class Tumbling(Windowing):
    """Fixed, non-overlapping windows of ``size``: each element in exactly one substream."""

    size: int | str
    namespace: str = "tumbling"

    @property
    def size_ms(self) -> int:
        return duration_ms(self.size, "Tumbling.size")

    def assign(
        self, times_ms: npt.NDArray[np.int64]
    ) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64], npt.NDArray[np.int64]]:
        size = self.size_ms
        starts = np.floor_divide(times_ms, size) * size
        return np.arange(len(times_ms), dtype=np.int64), starts, starts + size

    def closed_before(self, frontier_ms: int) -> Substream | None:
        size = self.size_ms
        end = frontier_ms // size * size
        return Substream(self.namespace, end - size, end)


@dataclass(frozen=True)
class Sliding(Windowing):
    """Windows of ``size`` starting every ``slide``: each element in ``size / slide`` substreams."""

    size: int | str
    slide: int | str
    namespace: str = "sliding"

    def __post_init__(self) -> None:
        size = duration_ms(self.size, "Sliding.size")
        slide = duration_ms(self.slide, "Sliding.slide")
        if size % slide:
            raise ConfigError("Sliding.slide", f"must divide the size ({size} ms), got {slide} ms")

    def assign(
        self, times_ms: npt.NDArray[np.int64]
    ) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64], npt.NDArray[np.int64]]:
        size = duration_ms(self.size)
        slide = duration_ms(self.slide)
        per = size // slide
        last_start = np.floor_divide(times_ms, slide) * slide
        idx = np.repeat(np.arange(len(times_ms), dtype=np.int64), per)
        back = np.tile(np.arange(per, dtype=np.int64), len(times_ms)) * slide
        starts = np.repeat(last_start, per) - back
        return idx, starts, starts + size

    def closed_before(self, frontier_ms: int) -> Substream | None:
        size = duration_ms(self.size)
        slide = duration_ms(self.slide)
        end = frontier_ms // slide * slide
        return Substream(self.namespace, end - size, end)
