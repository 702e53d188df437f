"""How to order a stream: :class:`OrderingConfig`, validated when it is built."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from spark_ext.errors import ConfigError

__all__ = ["OrderingConfig"]


@dataclass(frozen=True)
class OrderingConfig:
    """How to order: the source partitions, the shards, the buffer's bound."""

    partitions: tuple[tuple[str, int], ...]  # every (topic, partition): the release waits for all
    shards: int = 2  # groups of the stateful operator (keys spread by a stable hash)
    buffered: bool = True  # False: fold in arrival order (the naive operator, for comparison)
    max_buffered_rows: int = 1_000_000  # per shard; past it OrderingBufferFull

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
