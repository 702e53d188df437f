"""The Kafka agent's topics record by record: a ``read_committed`` reader of partition 0 by
offset; a log record above :data:`PART_CHARS` as consecutive ``{"t": "part", "i", "n", "data"}``
records of one transaction; a snapshot as chunk records of a compacted topic.

Chunk ``i`` of ``n`` (at most :data:`CHUNK_BYTES`) is keyed ``<slot>.<i>``; its value is a
header line ``{"log_offset", "i", "n", "bytes", "sha256", "prev"}`` and then the chunk's bytes
(``log_offset``: the log position the state covers; ``prev``: the previous snapshot's last
chunk, the fallback). Why parts, slots and how the newest is found: docs/design.md, "Tracker".
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
from collections.abc import Iterator
from typing import Any

from spark_ext.kafka_clients import consumer
from spark_ext.tracker.errors import TrackerLogCorrupt, TrackerUnavailable

__all__ = ["PART_CHARS", "PartBuffer", "TopicReader", "newest_snapshot", "split_record"]

log = logging.getLogger(__name__)

#: Largest chunk of a snapshot record (Kafka's default ``max.message.bytes`` is 1 MB).
CHUNK_BYTES = 512 * 1024


#: How long a read (or a wait for end events to be visible) may take before the agent is
#: unavailable.
READ_TIMEOUT_S = 60.0
#: Characters of a record's JSON per part. The JSON is ASCII (``ensure_ascii``), and a part
#: escapes it once more: a part record stays below 2 x this plus a few bytes, under 1 MB.
PART_CHARS = 256 * 1024


class TopicReader:
    """A ``read_committed`` reader of partition 0 of one topic, by offset range."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        from kafka import TopicPartition

        self.topic = topic
        self.tp = TopicPartition(topic, 0)
        try:
            self.consumer = consumer(
                bootstrap,
                enable_auto_commit=False,
                group_id=None,
                isolation_level="read_committed",
                auto_offset_reset="earliest",
            )
            self.consumer.assign([self.tp])
        except Exception as e:  # kafka-python raises NoBrokersAvailable and friends
            raise TrackerUnavailable(f"cannot read {topic} at {bootstrap}: {e}") from e

    def end(self) -> int:
        """The last stable offset: records below it are committed (or aborted), none open."""
        try:
            return int(self.consumer.end_offsets([self.tp])[self.tp])
        except Exception as e:
            raise TrackerUnavailable(f"cannot read the end offset of {self.topic}: {e}") from e

    def start(self) -> int:
        """The log start offset (records below it were deleted)."""
        try:
            return int(self.consumer.beginning_offsets([self.tp])[self.tp])
        except Exception as e:
            raise TrackerUnavailable(f"cannot read the start offset of {self.topic}: {e}") from e

    def read(self, start: int, stop: int) -> Iterator[tuple[int, bytes]]:
        """Committed records with ``start <= offset < stop`` as ``(offset, value)``."""
        if start >= stop:
            return
        self.consumer.seek(self.tp, start)
        deadline = time.monotonic() + READ_TIMEOUT_S
        while self.consumer.position(self.tp) < stop:
            if time.monotonic() > deadline:
                raise TrackerUnavailable(f"reading {self.topic} [{start}, {stop}) timed out")
            batch = self.consumer.poll(timeout_ms=200)
            for msg in batch.get(self.tp, []):
                if msg.offset >= stop:
                    return
                yield msg.offset, msg.value

    def close(self) -> None:
        self.consumer.close()


def decode(topic: str, offset: int, value: bytes) -> Any:
    """The JSON value of the record at ``offset``, or :class:`TrackerLogCorrupt`."""
    try:
        return json.loads(value)
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise TrackerLogCorrupt(f"{topic} at offset {offset}: {e}") from e


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


def last_record(reader: TopicReader) -> tuple[int, bytes] | None:
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


def _read_at(reader: TopicReader, last: int, value: bytes) -> tuple[Any, dict[str, Any]] | None:
    """``(state, header)`` of the snapshot whose last chunk (``value``) is at ``last``; None if
    not whole."""
    try:
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


def newest_snapshot(reader: TopicReader) -> tuple[dict[str, Any], dict[str, Any], int] | None:
    """``(state, header, last chunk offset)`` of the newest whole snapshot (or the one
    before it when the newest does not verify); None when there is none."""
    found = last_record(reader)
    for _ in range(2):  # the newest, then the one before it
        if found is None:
            return None
        last, value = found
        whole = _read_at(reader, last, value)
        if whole is not None:
            return whole[0], whole[1], last
        try:
            prev = int(_split(value)[0]["prev"])
        except (ValueError, KeyError, TypeError):
            return None  # no previous one (or no header to name it)
        found = next(reader.read(prev, prev + 1), None)
    return None
