"""Figures of dedup per bucket, per batch and per run: :class:`DedupMetrics`."""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from typing import ClassVar

__all__ = ["DedupMetrics"]


@dataclass
class DedupMetrics:
    """Figures of one bucket and batch, of a batch, or of a run; how they add up:
    docs/design.md, "Dedup", metrics."""

    rows: int = 0
    bloom_negative: int = 0
    catalog_lookups: int = 0
    catalog_duplicates: int = 0
    batch_duplicates: int = 0
    false_positives: int = 0
    replayed_self: int = 0
    state_bytes: int = 0  # gauge: dedup (and ordering buffer) state after the batch
    buffered_rows: int = 0  # gauge: elements held by the ordering buffer after the batch
    late_rows: int = 0
    newest_generation: int = -1  # a maximum, never a sum

    GAUGES: ClassVar[frozenset[str]] = frozenset({"state_bytes", "buffered_rows"})

    @property
    def lookups_avoided(self) -> float:
        """Share of rows the filter answered alone (no catalog lookup)."""
        return self.bloom_negative / self.rows if self.rows else 0.0

    @property
    def observed_fp_rate(self) -> float:
        """False positives among the rows not seen before (true negatives + false positives)."""
        negatives = self.bloom_negative + self.false_positives
        return self.false_positives / negatives if negatives else 0.0

    def __str__(self) -> str:
        return (
            f"{self.rows} rows, {self.batch_duplicates + self.catalog_duplicates} duplicates, "
            f"lookups avoided {100 * self.lookups_avoided:.1f}%, observed FP "
            f"{self.observed_fp_rate:.4f}, state {self.state_bytes} bytes, buffered "
            f"{self.buffered_rows}"
        )

    def _merged(self, other: DedupMetrics, sum_gauges: bool) -> DedupMetrics:
        a, b = asdict(self), asdict(other)
        merged = {
            k: a[k] + b[k] if sum_gauges or k not in self.GAUGES else b[k]
            for k in a
            if k != "newest_generation"
        }
        merged["newest_generation"] = max(self.newest_generation, other.newest_generation)
        return DedupMetrics(**merged)

    def __add__(self, other: DedupMetrics) -> DedupMetrics:
        """Run total: counters summed, gauges of ``other`` (the later batch)."""
        return self._merged(other, sum_gauges=False)

    @classmethod
    def of_buckets(cls, buckets: Iterable[DedupMetrics]) -> DedupMetrics:
        """The metrics of one batch from those of its buckets: everything summed."""
        total = cls()
        for m in buckets:
            total = total._merged(m, sum_gauges=True)
        return total

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> DedupMetrics:
        known = {f for f in cls.__dataclass_fields__}
        return cls(**{k: v for k, v in json.loads(text).items() if k in known})
