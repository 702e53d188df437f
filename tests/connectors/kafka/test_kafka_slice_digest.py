"""The slice digest computed over Arrow columns equals the row-by-row one (issue #14).

Slice records written by the row-by-row digest must still match a re-run's digest, so the
batch-wise digest has to give the same value for the same records, whatever the column types.
"""

from __future__ import annotations

import hashlib
import random

import pyarrow as pa
import pytest

from connectors.kafka.digest import SliceDigest, framed_rows
from connectors.kafka.records import arrow_columns, arrow_rows


class RowwiseDigest(SliceDigest):
    """The row-by-row reference: the framing of connectors.kafka.digest's docstring, per record."""

    def add(
        self, key: bytes | None, value: bytes | None, partition: int | None, rid: bytes | None
    ) -> None:
        h = hashlib.blake2b(digest_size=8)
        for field in (rid, key, value):
            h.update(b"\xff\xff\xff\xff" if field is None else len(field).to_bytes(4, "big"))
            h.update(field or b"")
        h.update(b"-" if partition is None else partition.to_bytes(4, "big", signed=True))
        self.total = (self.total + int.from_bytes(h.digest(), "big")) % 2**64
        self.count += 1


def _rowwise(batch: pa.RecordBatch) -> str:
    digest = RowwiseDigest()
    for key, value, part, rid in arrow_rows(batch):
        digest.add(key, value, part, rid.encode() if rid is not None else None)
    return digest.value


def _random_batch(types: dict[str, pa.DataType], n: int, seed: int) -> pa.RecordBatch:
    rng = random.Random(seed)

    def text() -> str | None:
        if rng.random() < 0.1:
            return None
        return "".join(rng.choice("ab/é{}\x00") for _ in range(rng.randrange(0, 12)))

    def cell(t: pa.DataType) -> object:
        if pa.types.is_integer(t):
            return None if rng.random() < 0.2 else rng.randrange(-(2**31), 2**31)
        s = text()
        return s.encode() if s is not None and pa.types.is_binary(t) else s

    cols = {name: pa.array([cell(t) for _ in range(n)], t) for name, t in types.items()}
    return pa.RecordBatch.from_pydict(cols)


@pytest.mark.parametrize(
    "types",
    [
        {
            "key": pa.binary(),
            "value": pa.string(),
            "record_id": pa.string(),
            "partition": pa.int32(),
        },
        {"value": pa.binary()},
        {"value": pa.large_string(), "key": pa.large_binary()},
        {"key": pa.string(), "value": pa.binary(), "partition": pa.int32()},
        {"value": pa.string(), "record_id": pa.string()},
    ],
    ids=["all", "value-only", "large-types", "no-record-id", "no-key"],
)
def test_batch_digest_equals_rowwise_digest(types: dict[str, pa.DataType]) -> None:
    batch = _random_batch(types, 500, seed=len(types))
    batched = SliceDigest()
    batched.add_batch(batch)
    assert batched.value == _rowwise(batch)


def test_batch_digest_of_known_records_is_the_recorded_value() -> None:
    """A value computed by the row-by-row digest (slice records already in topics)."""
    old = RowwiseDigest()
    old.add(b"k", b"1", None, b"t/0/1")
    old.add(None, b"", 0, b"t/0/2")
    old.add(b"", None, -1, None)
    batch = pa.RecordBatch.from_pydict(
        {
            "key": pa.array([b"k", None, b""], pa.binary()),
            "value": pa.array(["1", "", None], pa.string()),
            "partition": pa.array([None, 0, -1], pa.int32()),
            "record_id": pa.array(["t/0/1", "t/0/2", None], pa.string()),
        }
    )
    new = SliceDigest()
    new.add_batch(batch)
    assert new.value == old.value


def test_batch_digest_is_order_independent_across_batches() -> None:
    batch = _random_batch({"value": pa.string(), "record_id": pa.string()}, 300, seed=7)
    whole, split = SliceDigest(), SliceDigest()
    whole.add_batch(batch)
    reversed_rows = batch.take(pa.array(range(batch.num_rows - 1, -1, -1)))
    split.add_batch(reversed_rows.slice(0, 100))
    split.add_batch(reversed_rows.slice(100))
    assert split.value == whole.value


def test_batch_digest_tells_a_null_from_an_empty_field() -> None:
    empty = pa.RecordBatch.from_pydict({"key": pa.array([b""]), "value": pa.array([b"v"])})
    null = pa.RecordBatch.from_pydict(
        {"key": pa.array([None], pa.binary()), "value": pa.array([b"v"])}
    )
    a, b = SliceDigest(), SliceDigest()
    a.add_batch(empty)
    b.add_batch(null)
    assert a.value != b.value
    assert framed_rows(empty).to_pylist() != framed_rows(null).to_pylist()


def test_arrow_columns_gives_bytes_for_string_columns() -> None:
    batch = pa.RecordBatch.from_pydict(
        {
            "key": pa.array(["é", None], pa.string()),
            "value": pa.array(["v", "w"], pa.large_string()),
            "partition": pa.array([1, None], pa.int32()),
        }
    )
    rows = arrow_columns(batch)
    assert rows.keys == ["é".encode(), None]
    assert rows.values == [b"v", b"w"]
    assert rows.partitions == [1, None]
    assert rows.record_ids is None
    assert [(k, v, p) for k, v, p, _ in arrow_rows(batch)] == list(
        zip(rows.keys, rows.values, rows.partitions, strict=True)
    )
