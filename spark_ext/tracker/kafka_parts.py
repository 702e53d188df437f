"""Kafka agent log records above :data:`PART_CHARS`, sent as consecutive
``{"t": "part", "i", "n", "data"}`` records of one transaction (docs/design.md, "Tracker")."""

from __future__ import annotations

import json
from typing import Any

from spark_ext.tracker.errors import TrackerLogCorrupt

__all__ = ["PART_CHARS", "PartBuffer", "split_record"]

#: Characters of a record's JSON per part. The JSON is ASCII (``ensure_ascii``), and a part
#: escapes it once more: a part record stays below 2 x this plus a few bytes, under 1 MB.
PART_CHARS = 256 * 1024


def split_record(body: str) -> list[bytes]:
    """``body`` (a record's ASCII JSON) as the values to send: itself, or its parts."""
    if len(body) <= PART_CHARS:
        return [body.encode()]
    slices = [body[i : i + PART_CHARS] for i in range(0, len(body), PART_CHARS)]
    return [
        json.dumps(
            {"t": "part", "i": i, "n": len(slices), "data": s}, separators=(",", ":")
        ).encode()
        for i, s in enumerate(slices)
    ]


class PartBuffer:
    """Reassembles part records read in offset order; whole records pass through."""

    def __init__(self) -> None:
        self._parts: list[str] = []

    def clear(self) -> None:
        self._parts = []

    def add(self, record: Any, where: str) -> Any | None:
        """The whole record once complete (a non-part record at once), else None."""
        if not isinstance(record, dict) or record.get("t") != "part":
            if self._parts:
                raise TrackerLogCorrupt(f"{where}: a record amid the parts of another")
            return record
        i, n = int(record["i"]), int(record["n"])
        if i != len(self._parts):
            raise TrackerLogCorrupt(f"{where}: part {i} of {n} after {len(self._parts)} parts")
        self._parts.append(str(record["data"]))
        if i + 1 < n:
            return None
        body, self._parts = "".join(self._parts), []
        try:
            return json.loads(body)
        except json.JSONDecodeError as e:
            raise TrackerLogCorrupt(f"{where}: parts do not form a record: {e}") from e
