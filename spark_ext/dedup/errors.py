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
    """Bytes given to ``BloomFilter.from_bytes`` or ``RotatingBloom.load_bytes`` are no filter."""


class DedupInputError(DedupError, ValueError):
    """A batch cannot be deduplicated as given (null keys without a quarantine, coordinates that
    do not identify a delivery); nothing of it committed."""


class DedupStateError(DedupError):
    """Saved filter state is ahead of the running batch (a reset checkpoint) or damaged."""


class LateRowsWithoutQuarantineError(DedupError):
    """A batch holds late rows and the sink has no ``quarantine_path`` (invariant 7); nothing
    of the batch written."""

    def __init__(self, sink_id: str, batch_id: int, rows: int) -> None:
        self.sink_id, self.batch_id, self.rows = sink_id, batch_id, rows
        super().__init__(
            f"sink {sink_id!r} batch {batch_id}: {rows} late rows and no quarantine_path to "
            "write them to; give the sink one"
        )
