"""DedupSink checks its sink id at construction; the ids it derives are no sink id's."""

from __future__ import annotations

import pytest

from spark_ext.dedup import DedupConfig, DedupSink
from spark_ext.sinks.errors import SinkConfigError
from spark_ext.sinks.protocol import validate_sink_id


def test_dedup_sink_rejects_an_invalid_sink_id_before_any_batch():
    config = DedupConfig(catalog_path="unused")
    with pytest.raises(SinkConfigError, match="sink_id"):
        DedupSink(config, "out", sink_id="orders topic/1")


def test_ids_the_dedup_sink_derives_are_distinct_and_no_valid_sink_id():
    config = DedupConfig(catalog_path="unused")
    sink = DedupSink(config, "out", sink_id="orders", quarantine_path="late")
    derived = [sink.catalog_app_id, sink.late_app_id]
    assert len({sink.sink_id, *derived}) == 3
    for app_id in derived:  # what sink "orders.catalog" derives can never be one of these
        with pytest.raises(SinkConfigError):
            validate_sink_id(app_id)
