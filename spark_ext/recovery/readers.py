"""Reading a job's outputs back as rows: Delta tables (delta-rs). Kafka topics are read by the
cases (``jobs/cases``), the layer that may import ``connectors``."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

__all__ = ["read_delta_rows"]


def read_delta_rows(path: Path, columns: Sequence[str]) -> list[dict[str, Any]]:
    """Rows of the Delta table at ``path`` (read with delta-rs); empty if there is no table."""
    from deltalake import DeltaTable

    if not DeltaTable.is_deltatable(str(path)):
        return []
    frame = DeltaTable(str(path)).to_pandas(columns=list(columns))
    return frame.to_dict("records")
