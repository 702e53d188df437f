"""64-bit element labels, pure functions of ``(topic, partition, offset)``, and XOR folds
(docs/design.md, "Tracker"; invariant 2)."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence
from functools import lru_cache

import numpy as np
import numpy.typing as npt

from spark_ext.hashing import splitmix64

__all__ = ["key_hashes", "label_of", "labels_of", "string_seed", "xor_fold"]


@lru_cache(maxsize=4096)
def string_seed(text: str) -> int:
    """A stable unsigned 64-bit seed of ``text`` (BLAKE2b, 8 bytes, little endian)."""
    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "little")


def labels_of(
    topics: Sequence[str] | npt.ArrayLike,
    partitions: npt.ArrayLike,
    offsets: npt.ArrayLike,
) -> npt.NDArray[np.int64]:
    """Labels of many elements (equal-length source coordinates) as signed 64-bit integers."""
    names = np.asarray(topics if isinstance(topics, np.ndarray) else list(topics), dtype=object)  # type: ignore[arg-type]
    # one BLAKE2b per distinct topic (a batch holds a few topics and many rows)
    distinct, inverse = np.unique(names.astype(str), return_inverse=True)
    seeds = np.fromiter((string_seed(str(t)) for t in distinct), dtype=np.uint64)[
        inverse.reshape(-1)
    ]
    parts = np.asarray(partitions, dtype=np.int64).astype(np.uint64)
    offs = np.asarray(offsets, dtype=np.int64).astype(np.uint64)
    return splitmix64(splitmix64(seeds ^ parts) ^ offs).view(np.int64)


def label_of(topic: str, partition: int, offset: int) -> int:
    """The label of one element (see :func:`labels_of`)."""
    return int(labels_of([topic], [partition], [offset])[0])


def key_hashes(keys: Iterable[str]) -> npt.NDArray[np.uint64]:
    """Stable unsigned 64-bit hashes of grouping keys (used to pick an operator shard)."""
    return splitmix64(np.fromiter((string_seed(str(k)) for k in keys), dtype=np.uint64))


def xor_fold(labels: Iterable[int]) -> int:
    """XOR of ``labels``; 0 for none. Every label XOR-ed twice cancels out."""
    acc = 0
    for label in labels:
        acc ^= int(label)
    return acc
