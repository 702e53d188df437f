"""The idempotent Kafka sink's rows named in Arrow: the same record ids and keys as before.

A record id is ``<sink>/<batch>/<record_id>`` (the header of every record and the key of a
row without one); a replay recognises what is written by these bytes, so they must not change.
"""

from __future__ import annotations

import pyarrow as pa
import pytest

from connectors.kafka.idempotent import record_id
from connectors.kafka.records import NamedRows
from spark_ext.sinks.errors import SinkConfigError


def _batch(**cols: pa.Array) -> pa.RecordBatch:
    return pa.RecordBatch.from_pydict(cols)


def test_named_rows_carry_the_record_ids_and_keys_the_row_loop_gave() -> None:
    batch = _batch(
        key=pa.array(["k", None, "é"], pa.string()),
        value=pa.array([b"1", b"2", None], pa.binary()),
        record_id=pa.array(["t/0/1", "t/0/2", "t/1/é"], pa.string()),
    )
    prefix = record_id("s", 4, "").encode()
    rows = NamedRows.of(batch, prefix)
    names = [record_id("s", 4, r).encode() for r in ("t/0/1", "t/0/2", "t/1/é")]
    assert rows.names == names
    assert rows.keys == [b"k", names[1], "é".encode()]
    assert rows.values == [b"1", b"2", None]
    assert rows.partitions is None


def test_named_rows_without_written_ids_keep_the_others_in_order() -> None:
    batch = _batch(
        value=pa.array(["a", "b", "c"]),
        partition=pa.array([0, None, 2], pa.int32()),
        record_id=pa.array(["x", "y", "z"]),
    )
    rows = NamedRows.of(batch, b"s/0/")
    left = rows.without({b"s/0/y"})
    assert left.names == [b"s/0/x", b"s/0/z"]
    assert left.values == [b"a", b"c"]
    assert left.partitions == [0, 2]
    assert rows.without(set()) is rows
    assert rows.head().names == [b"s/0/x"] and rows.tail().names == [b"s/0/y", b"s/0/z"]


def test_a_null_record_id_is_a_config_error() -> None:
    batch = _batch(value=pa.array(["a", "b"]), record_id=pa.array(["x", None], pa.string()))
    with pytest.raises(SinkConfigError):
        NamedRows.of(batch, b"s/0/")
