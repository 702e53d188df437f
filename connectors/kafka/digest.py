"""The slice digest of the two-phase Kafka sink: record count and the sum (mod 2**64) of one
64-bit BLAKE2b hash per record, so the same records in any order give the same digest. A record's
hash covers ``record_id``, ``key`` and ``value``, each as a 4-byte big-endian length (``ff ff ff
ff``: null) and its bytes, then the partition as a 4-byte signed big-endian int (``-``: none);
the tests check :meth:`SliceDigest.add_batch` (in Arrow) against a row-by-row reference.
"""

from __future__ import annotations

import hashlib
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

__all__ = ["SliceDigest", "as_binary", "framed_rows"]

_MASK = (1 << 64) - 1
_NULL_LEN = b"\xff\xff\xff\xff"
_NO_PARTITION = b"-"


def as_binary(column: pa.Array) -> pa.Array:
    """``column`` as (large) binary: a string column's UTF-8 bytes, without a copy."""
    if pa.types.is_string(column.type):
        return column.cast(pa.binary())
    if pa.types.is_large_string(column.type):
        return column.cast(pa.large_binary())
    return column


def _be4(ints: np.ndarray, n: int) -> pa.Array:
    """Each int32 of ``ints`` as 4 big-endian bytes (a binary array of ``n`` values)."""
    data = np.ascontiguousarray(ints, dtype=">i4").tobytes()
    fixed = pa.FixedSizeBinaryArray.from_buffers(pa.binary(4), n, [None, pa.py_buffer(data)])
    return fixed.cast(pa.binary())


def _framed_field(column: pa.Array | None, n: int) -> list[Any]:
    """Length prefix and bytes of one field of every row (a null: ``ff ff ff ff``, nothing)."""
    if column is None:
        return [pa.scalar(_NULL_LEN, pa.large_binary())]
    column = as_binary(column)
    lengths = pc.fill_null(pc.binary_length(column), -1).to_numpy(zero_copy_only=False)
    data = pc.fill_null(column, pa.scalar(b"", column.type)).cast(pa.large_binary())
    return [_be4(lengths, n).cast(pa.large_binary()), data]


def _framed_partition(column: pa.Array | None, n: int) -> Any:
    if column is None:
        return pa.scalar(_NO_PARTITION, pa.large_binary())
    ints = pc.fill_null(column, 0).to_numpy(zero_copy_only=False)
    return pc.if_else(
        pc.is_null(column),
        pa.scalar(_NO_PARTITION, pa.large_binary()),
        _be4(ints, n).cast(pa.large_binary()),
    )


def framed_rows(batch: pa.RecordBatch) -> pa.Array:
    """The framed bytes of every row of ``batch`` (what :class:`SliceDigest` hashes; absent
    columns frame as nulls)."""
    n = batch.num_rows
    names = batch.schema.names

    def column(name: str) -> pa.Array | None:
        return batch.column(name) if name in names else None

    parts = [
        *_framed_field(column("record_id"), n),
        *_framed_field(column("key"), n),
        *_framed_field(column("value"), n),
        _framed_partition(column("partition"), n),
    ]
    joined = pc.binary_join_element_wise(*parts, pa.scalar(b"", pa.large_binary()))
    if isinstance(joined, pa.Scalar):  # every part a constant (no column present)
        return pa.array([joined.as_py()] * n, pa.large_binary())
    return joined


class SliceDigest:
    """An order-independent digest of a slice's records (count and sum of 64-bit hashes)."""

    def __init__(self) -> None:
        self.count = 0
        self.total = 0

    def add_batch(self, batch: pa.RecordBatch) -> None:
        """Add every row of an Arrow record batch."""
        if not batch.num_rows:
            return
        blake = hashlib.blake2b
        hashes = b"".join(
            [blake(row, digest_size=8).digest() for row in framed_rows(batch).to_pylist()]
        )
        total = int(np.frombuffer(hashes, dtype=">u8").astype(np.uint64).sum(dtype=np.uint64))
        self.total = (self.total + total) & _MASK
        self.count += batch.num_rows

    @property
    def value(self) -> str:
        """``<count>:<sum as 16 hex digits>``."""
        return f"{self.count}:{self.total:016x}"
