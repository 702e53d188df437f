"""Errors of dedup: one class per failure kind, all :class:`DedupError`."""

from __future__ import annotations

from spark_ext.errors import SparkExtError

__all__ = [
    "BloomFormatError",
    "DedupError",
    "DedupInputError",
    "DedupStateError",
    "LateRowsWithoutQuarantineError",
]


class DedupError(SparkExtError):
    """Base class of every error dedup raises on purpose."""


class BloomFormatError(DedupError, ValueError):
    """Bytes given to :meth:`~spark_ext.dedup.filters.BloomFilter.from_bytes` (or to
    :meth:`~spark_ext.dedup.filters.RotatingBloom.load_bytes`) are not a serialised filter."""


class DedupInputError(DedupError, ValueError):
    """A batch cannot be deduplicated as given: null keys without a quarantine, or coordinates
    that do not identify a delivery. Raised before anything of the batch is committed."""


class DedupStateError(DedupError):
    """Saved filter state does not belong to this checkpoint (a version ahead of the running
    batch: the checkpoint was reset), or is damaged (checksum, magic, length)."""


class LateRowsWithoutQuarantineError(DedupError):
    """A batch holds late rows (arrived after their place in the order was released) and the
    sink has no ``quarantine_path``: dropping them would lose rows without a trace
    (docs/design.md, invariant 7). Raised before anything of the batch is written."""

    def __init__(self, sink_id: str, batch_id: int, rows: int) -> None:
        self.sink_id = sink_id
        self.batch_id = batch_id
        self.rows = rows
        super().__init__(
            f"sink {sink_id!r} batch {batch_id}: {rows} late rows and no quarantine_path to "
            "write them to; give the sink one"
        )
