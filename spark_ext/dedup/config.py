"""What to deduplicate on: :class:`DedupConfig`, validated once when it is built."""

from __future__ import annotations

import math
from dataclasses import dataclass

from spark_ext.dedup.filters import RotatingBloom
from spark_ext.errors import ConfigError
from spark_ext.storage import StorageSettings

__all__ = ["DedupConfig"]


@dataclass(frozen=True)
class DedupConfig:
    """How to deduplicate (the window and the catalog: docs/design.md, "Dedup")."""

    catalog_path: str  # folder of the exact catalog (a Delta table)
    capacity: int = 1_000_000  # distinct ids per rotation interval, all buckets: sizes filters
    fp_rate: float = 0.01  # false-positive rate of each filter at capacity
    rotation_ms: int = 3_600_000  # event-time length of one filter generation
    generations: int = 2  # generations kept: the window is generations * rotation_ms
    buckets: int = 8  # groups of the stateful operator
    id_column: str = "record_id"  # the id (string)
    event_time_column: str = "event_time"  # a timestamp
    #: Columns that identify one delivery of a record, compared as their string form.
    coordinate_columns: tuple[str, ...] = ("topic", "partition", "offset")
    #: Of a ``catalog_path`` on object storage (the profile's ``[storage]``): the catalog is
    #: read in tasks, which have no session to take them from.
    storage: StorageSettings | None = None

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
