"""Kafka-agent log records above Kafka's record size: cut in parts, put back together."""

from __future__ import annotations

import json

import pytest

from spark_ext.tracker.errors import TrackerLogCorrupt
from spark_ext.tracker.kafka_records import PART_CHARS, PartBuffer, split_record


def test_a_large_record_is_cut_in_parts_below_1_mb_and_read_back_whole():
    record = {"t": "apply", "reports": [{"s": f'w/"{i}"', "x": i} for i in range(60_000)]}
    body = json.dumps(record, sort_keys=True, separators=(",", ":"))
    values = split_record(body)
    assert len(values) == -(-len(body) // PART_CHARS) > 1
    assert max(len(v) for v in values) < 1_000_000
    buffer = PartBuffer()
    got = [buffer.add(json.loads(v), "log") for v in values]
    assert got[:-1] == [None] * (len(values) - 1) and got[-1] == record


def test_a_small_record_is_sent_as_it_always_was():
    assert split_record('{"t":"declare"}') == [b'{"t":"declare"}']
    assert PartBuffer().add({"t": "declare"}, "log") == {"t": "declare"}


def test_parts_out_of_order_or_interrupted_are_a_corrupt_log_not_a_wrong_state():
    values = [json.loads(v) for v in split_record("[" + "1," * PART_CHARS + "1]")]
    buffer = PartBuffer()
    with pytest.raises(TrackerLogCorrupt, match="part 1 of"):
        buffer.add(values[1], "log")
    buffer.add(values[0], "log")
    with pytest.raises(TrackerLogCorrupt, match="amid the parts"):
        buffer.add({"t": "declare"}, "log")
