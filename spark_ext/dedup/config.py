"""What to deduplicate on: :class:`DedupConfig`, validated once when it is built."""

from __future__ import annotations

import math
from dataclasses import dataclass

from spark_ext.dedup.filters import RotatingBloom
from spark_ext.errors import ConfigError

__all__ = ["DedupConfig"]


@dataclass(frozen=True)
class DedupConfig:
    """How to deduplicate.

    Parameters
    ----------
    catalog_path
        Folder of the exact catalog (a Delta table).
    capacity
        Distinct ids expected per rotation interval, over all buckets; sizes the filters.
    fp_rate
        Configured false-positive rate of each filter at ``capacity``.
    rotation_ms
        Event-time length of one filter generation.
    generations
        Generations kept: the dedup window is ``generations * rotation_ms`` of event time,
        sink-wide (docs/design.md, "Dedup", one catalog).
    buckets
        Number of buckets (groups of the stateful operator).
    id_column, event_time_column
        The record id (string) and the event time (timestamp) columns.
    coordinate_columns
        Columns that identify one delivery of a record (e.g. topic, partition, offset):
        strings or integers, compared as their string form.
    """

    catalog_path: str
    capacity: int = 1_000_000
    fp_rate: float = 0.01
    rotation_ms: int = 3_600_000
    generations: int = 2
    buckets: int = 8
    id_column: str = "record_id"
    event_time_column: str = "event_time"
    coordinate_columns: tuple[str, ...] = ("topic", "partition", "offset")

    def __post_init__(self) -> None:
        if self.buckets < 1:
            raise ConfigError("dedup.buckets", f"must be >= 1, got {self.buckets}")
        if not self.coordinate_columns:
            raise ConfigError("dedup.coordinate_columns", "must name at least one column")
        self.new_bloom()  # validates capacity, fp_rate, rotation_ms, generations

    @property
    def capacity_per_bucket(self) -> int:
        return max(1, math.ceil(self.capacity / self.buckets))

    def new_bloom(self) -> RotatingBloom:
        return RotatingBloom(
            self.capacity_per_bucket, self.fp_rate, self.rotation_ms, self.generations
        )
