"""The ingest pipeline as one query: one read of the topic, both tables exactly once, and a
quarantine that keeps the raw bytes of each bad record with a reason of its own."""

from __future__ import annotations

import pytest
from deltalake import DeltaTable

from connectors.kafka import produce, produce_json
from jobs.ingest_events import IngestPaths, start_ingest
from tests.conftest import await_done

pytestmark = pytest.mark.integration

T = "2026-01-01T00:00:00Z"
#: Nine kinds of bad record, as a new user would try them, and the reason each must get.
BAD: dict[bytes | None, str] = {
    b"{not json": "malformed_json",
    b'{"event_id": "x1", "user_id": "u", "amount": "twelve", "event_time": "'
    + T.encode()
    + b'"}': "type_mismatch:amount",
    b'{"event_id": "x2", "user_id": "u", "amount": 1.0, "event_time": "not a time"}': "type_mismatch:event_time",
    b'{"user_id": "u", "amount": 1.0, "event_time": "'
    + T.encode()
    + b'"}': "missing_field:event_id",
    b'{"event_id": "x3", "user_id": "u", "amount": 1.0}': "missing_field:event_time",
    b'{"event_id": "\xff\xfe", "user_id": "u", "amount": 1.0, "event_time": "'
    + T.encode()
    + b'"}': "not_utf8",
    b"[1, 2]": "not_an_object",
    b"": "empty_value",
    None: "null_value",
}


def by_value(pairs):
    """``(raw value, reason)`` pairs in order, the null value first."""
    return sorted(pairs, key=lambda kv: (kv[0] is not None, kv[0] or b"", kv[1]))


GOOD = [
    {"event_id": f"e{i}", "user_id": "u", "amount": float(i), "event_time": T} for i in range(20)
]


def test_one_query_writes_events_and_quarantine_with_raw_bytes_and_distinct_reasons(
    spark, kafka_bootstrap, new_topic, tmp_path
):
    topic = new_topic("ingest-bad", partitions=2)
    produce_json(kafka_bootstrap, topic, GOOD, partitions=2)
    produce(kafka_bootstrap, topic, [(f"bad{i}".encode(), v, i % 2) for i, v in enumerate(BAD)])
    paths = IngestPaths(tmp_path)

    active = len(spark.streams.active)
    query = start_ingest(spark, kafka_bootstrap, topic, paths, max_offsets_per_trigger=10)
    assert len(spark.streams.active) == active + 1  # one query, one read of the topic
    await_done(query, 300)
    assert query.exception() is None

    quarantine = spark.read.format("delta").load(str(paths.quarantine))
    got = by_value(
        ((None if r.raw_value is None else bytes(r.raw_value)), r.reason)
        for r in quarantine.collect()
    )
    assert got == by_value(BAD.items())
    events = spark.read.format("delta").load(str(paths.events))
    assert sorted(r.event_id for r in events.collect()) == sorted(e["event_id"] for e in GOOD)
    # delta-rs reads the same rows, raw bytes included.
    rs = DeltaTable(str(paths.quarantine)).to_pyarrow_table()
    assert by_value(zip(rs["raw_value"].to_pylist(), rs["reason"].to_pylist(), strict=True)) == got
    assert DeltaTable(str(paths.events)).to_pyarrow_table().num_rows == len(GOOD)

    # A restart from the checkpoint writes nothing twice.
    again = start_ingest(spark, kafka_bootstrap, topic, paths)
    await_done(again, 300)
    assert spark.read.format("delta").load(str(paths.events)).count() == len(GOOD)
    assert spark.read.format("delta").load(str(paths.quarantine)).count() == len(BAD)
