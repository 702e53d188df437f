"""Stable 64-bit hashes, the same in every process, machine and Python version (docs/design.md,
"Hashing").

>>> int(stable_hash64(["a"])[0]) == int(stable_hash64(["a"])[0])
True
>>> shard_of(["a", "b", "a"], 4).tolist()[0] == shard_of(["a"], 4).tolist()[0]
True
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np
import numpy.typing as npt
from pandas.util import hash_array

__all__ = ["HASH_KEY", "Keys", "shard_of", "splitmix64", "stable_hash64"]

#: The fixed SipHash key of :func:`stable_hash64` (16 bytes). Changing it re-shards every key
#: and invalidates every stored Bloom filter.
HASH_KEY = "spark_ext_bloom1"

#: Keys accepted by :func:`stable_hash64`: strings in a sequence, an object array or any iterable.
Keys = Sequence[str] | npt.NDArray[np.object_] | Iterable[str]

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)


def splitmix64(x: npt.NDArray[np.uint64]) -> npt.NDArray[np.uint64]:
    """The SplitMix64 finaliser on every element (a bijection of 64-bit integers)."""
    with np.errstate(over="ignore"):
        z = np.asarray(x, dtype=np.uint64) + _GOLDEN
        z = (z ^ (z >> np.uint64(30))) * _M1
        z = (z ^ (z >> np.uint64(27))) * _M2
        return z ^ (z >> np.uint64(31))


def stable_hash64(keys: Keys) -> npt.NDArray[np.uint64]:
    """A 64-bit hash per key, equal in every process (SipHash with :data:`HASH_KEY`)."""
    arr = np.asarray(keys if isinstance(keys, np.ndarray) else list(keys), dtype=object)
    if arr.size == 0:
        return np.zeros(0, dtype=np.uint64)
    return hash_array(arr, hash_key=HASH_KEY, categorize=False)


def shard_of(keys: Keys, shards: int) -> npt.NDArray[np.int32]:
    """Shard (or dedup bucket) per key among ``shards``: :func:`stable_hash64` modulo ``shards``."""
    return (stable_hash64(keys) % np.uint64(shards)).astype(np.int32)
