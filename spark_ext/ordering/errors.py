"""Errors of the ordering buffer: one class per failure kind."""

from __future__ import annotations

from spark_ext.errors import SparkExtError

__all__ = ["OrderingBufferFull"]


class OrderingBufferFull(SparkExtError, RuntimeError):
    """A shard buffers more than ``max_buffered_rows`` elements: some partition stalls. Raise
    the bound, close the idle partition, or send the key's end event."""
