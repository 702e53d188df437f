"""Shard keys that Spark's hash partitioning spreads over every task of the operator stage
(why, and that the keys belong to the checkpoint's layout: docs/design.md, "Tracked queries")."""

from __future__ import annotations

__all__ = ["SPARK_HASH_SEED", "shard_keys", "spark_hash_int", "spark_partition"]

_MASK = 0xFFFFFFFF
#: Spark's seed of ``hash()`` and of hash partitioning (``Murmur3Hash``).
SPARK_HASH_SEED = 42


def _rotl(x: int, r: int) -> int:
    return ((x << r) | (x >> (32 - r))) & _MASK


def spark_hash_int(value: int, seed: int = SPARK_HASH_SEED) -> int:
    """Spark's ``hash(cast(value as int))``: Murmur3 x86 32-bit of one int, as a signed int."""
    k1 = (value & _MASK) * 0xCC9E2D51 & _MASK
    k1 = _rotl(k1, 15) * 0x1B873593 & _MASK
    h1 = (seed & _MASK) ^ k1
    h1 = (_rotl(h1, 13) * 5 + 0xE6546B64) & _MASK
    h1 ^= 4  # the length in bytes
    h1 ^= h1 >> 16
    h1 = h1 * 0x85EBCA6B & _MASK
    h1 ^= h1 >> 13
    h1 = h1 * 0xC2B2AE35 & _MASK
    h1 ^= h1 >> 16
    return h1 - (1 << 32) if h1 & 0x80000000 else h1


def spark_partition(value: int, partitions: int) -> int:
    """The shuffle partition Spark's hash partitioning gives an int key (``pmod``)."""
    return spark_hash_int(value) % partitions


def shard_keys(shards: int, partitions: int) -> list[int]:
    """Key of each shard: shard ``i`` runs in shuffle partition ``i mod partitions``."""
    if shards <= 0 or partitions <= 0:
        raise ValueError(f"shards and partitions must be positive, got {shards}, {partitions}")
    keys: list[int] = []
    for i in range(shards):
        c = 0
        while c in keys or spark_partition(c, partitions) != i % partitions:
            c += 1
        keys.append(c)
    return keys
