"""How to order a stream: :class:`OrderingConfig`, validated when it is built."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from spark_ext.errors import ConfigError

__all__ = ["OrderingConfig"]


@dataclass(frozen=True)
class OrderingConfig:
    """How to order: the source partitions, the shards, the buffer's bound.

    Parameters
    ----------
    partitions
        Every ``(topic, partition)`` of the source; the progress release waits for all of them.
    shards
        Groups of the stateful operator (keys are spread over them by a stable hash).
    buffered
        ``False`` disables the buffer: elements are folded in arrival order (the naive
        operator, kept to show what the buffer fixes).
    max_buffered_rows
        Per shard; past it :class:`OrderingBufferFull` is raised.
    """

    partitions: tuple[tuple[str, int], ...]
    shards: int = 2
    buffered: bool = True
    max_buffered_rows: int = 1_000_000

    def __post_init__(self) -> None:
        if not self.partitions:
            raise ConfigError("ordering.partitions", "must list every source partition")
        if self.shards < 1:
            raise ConfigError("ordering.shards", f"must be >= 1, got {self.shards}")
        if self.max_buffered_rows < 1:
            raise ConfigError("ordering.max_buffered_rows", "must be >= 1")

    @classmethod
    def for_topic(cls, topic: str, partitions: int, **kwargs: Any) -> OrderingConfig:
        return cls(partitions=tuple((topic, p) for p in range(partitions)), **kwargs)
