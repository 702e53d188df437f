"""Reading a job's outputs back as rows: Delta tables (delta-rs) and Kafka topics."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any


def read_delta_rows(path: Path, columns: Sequence[str]) -> list[dict[str, Any]]:
    """Rows of the Delta table at ``path`` (read with delta-rs); empty if there is no table."""
    from deltalake import DeltaTable

    if not DeltaTable.is_deltatable(str(path)):
        return []
    frame = DeltaTable(str(path)).to_pandas(columns=list(columns))
    return frame.to_dict("records")


def read_kafka_json_rows(bootstrap: str, topic: str) -> list[dict[str, Any]]:
    """Committed JSON records of ``topic`` as rows, with ``partition`` and ``offset`` added."""
    from connectors.kafka import consume_all

    rows = []
    for partition, offset, _key, value in consume_all(bootstrap, topic):
        row = dict(json.loads(value))
        row.setdefault("partition", partition)
        row.setdefault("offset", offset)
        rows.append(row)
    return rows
