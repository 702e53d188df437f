"""Snapshots of a Kafka tracking agent's state as chunk records of a compacted topic.

Chunk ``i`` of ``n`` (at most :data:`CHUNK_BYTES`) is keyed ``<slot>.<i>``; its value is a
header line ``{"log_offset", "i", "n", "bytes", "sha256", "prev"}`` and then the chunk's bytes
(``log_offset``: the log position the state covers; ``prev``: the previous snapshot's last
chunk, the fallback). Why slots and how the newest is found: docs/design.md, "Tracker".
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Iterator
from typing import Any, Protocol

__all__ = ["CHUNK_BYTES", "OffsetReader", "chunk_records", "last_record", "newest_snapshot"]

log = logging.getLogger(__name__)

#: Largest chunk of a snapshot record (Kafka's default ``max.message.bytes`` is 1 MB).
CHUNK_BYTES = 512 * 1024


class OffsetReader(Protocol):
    """A ``read_committed`` reader of partition 0 of one topic."""

    def end(self) -> int: ...

    def read(self, start: int, stop: int) -> Iterator[tuple[int, bytes]]: ...


def chunk_records(
    state: dict[str, Any], log_offset: int, slot: int, prev: int | None
) -> list[tuple[bytes, bytes]]:
    """The ``(key, value)`` records of one snapshot of ``state`` (module docstring)."""
    data = json.dumps(state, sort_keys=True, separators=(",", ":")).encode()
    parts = [data[i : i + CHUNK_BYTES] for i in range(0, len(data), CHUNK_BYTES)] or [b""]
    sha = hashlib.sha256(data).hexdigest()
    out = []
    for i, part in enumerate(parts):
        header = {
            "log_offset": log_offset,
            "i": i,
            "n": len(parts),
            "bytes": len(data),
            "sha256": sha,
            "prev": prev,
            "slot": slot,
        }
        out.append((f"{slot}.{i}".encode(), json.dumps(header).encode() + b"\n" + part))
    return out


def _split(value: bytes) -> tuple[dict[str, Any], bytes]:
    head, _, part = value.partition(b"\n")
    return json.loads(head), part


def last_record(reader: OffsetReader) -> tuple[int, bytes] | None:
    """``(offset, value)`` of the last committed record (markers and aborted records skipped)."""
    end = reader.end()
    back = 8
    while True:
        start = max(0, end - back)
        found = list(reader.read(start, end))
        if found:
            return found[-1]
        if start == 0:
            return None
        back *= 4


def _read_at(reader: OffsetReader, last: int) -> tuple[dict[str, Any], dict[str, Any]] | None:
    """``(state, header)`` of the snapshot whose last chunk is at ``last``; None if not whole."""
    try:
        (_, value), *_ = list(reader.read(last, last + 1)) or [(last, b"")]
        header, _ = _split(value)
        first = last - (int(header["n"]) - 1)
        chunks = [_split(v) for _, v in reader.read(first, last + 1)]
        data = b"".join(part for _, part in chunks)
        if (
            [h["i"] for h, _ in chunks] != list(range(int(header["n"])))
            or {h["sha256"] for h, _ in chunks} != {header["sha256"]}
            or len(data) != header["bytes"]
            or hashlib.sha256(data).hexdigest() != header["sha256"]
        ):
            raise ValueError("chunks missing or checksum mismatch")
        return json.loads(data), header
    except (ValueError, KeyError, TypeError) as e:
        log.warning("tracker snapshot ending at offset %d is not whole (%s): ignored", last, e)
        return None


def newest_snapshot(reader: OffsetReader) -> tuple[dict[str, Any], dict[str, Any], int] | None:
    """``(state, header, last chunk offset)`` of the newest whole snapshot (or the one
    before it when the newest does not verify); None when there is none."""
    found = last_record(reader)
    last = found[0] if found is not None else None
    for _ in range(2):  # the newest, then the one before it
        if last is None:
            return None
        whole = _read_at(reader, last)
        if whole is not None:
            return whole[0], whole[1], last
        try:
            (_, value), *_ = list(reader.read(last, last + 1))
            prev = _split(value)[0].get("prev")
        except (ValueError, KeyError):
            prev = None
        last = int(prev) if prev is not None else None
    return None
