"""DedupSink checks its sink id at construction and derives only ids the validator accepts."""

from __future__ import annotations

import pytest

from spark_ext.dedup import DedupConfig, DedupSink
from spark_ext.sinks.errors import SinkConfigError
from spark_ext.sinks.protocol import validate_sink_id


def test_dedup_sink_rejects_an_invalid_sink_id_before_any_batch():
    config = DedupConfig(catalog_path="unused")
    with pytest.raises(SinkConfigError, match="sink_id"):
        DedupSink(config, "out", sink_id="orders topic/1")


def test_every_id_the_dedup_sink_writes_with_passes_the_validator():
    config = DedupConfig(catalog_path="unused")
    sink = DedupSink(config, "out", sink_id="orders", quarantine_path="late")
    derived = [sink.sink_id, sink.catalog_app_id, sink.late_app_id]
    assert [validate_sink_id(x) for x in derived] == derived
    assert len(set(derived)) == 3
