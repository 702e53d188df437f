"""Errors of dedup: one class per failure kind, all :class:`DedupError`."""

from __future__ import annotations

from spark_ext.errors import SparkExtError

__all__ = ["BloomFormatError", "DedupError", "DedupInputError", "DedupStateError"]


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
