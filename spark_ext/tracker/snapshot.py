"""Files of a local tracking agent (docs/design.md, "Tracker"): log segments ``tracker.<g>.log``
(``g`` = 0: ``tracker.log``) with the records after snapshot ``snapshot.<g>.json`` (a header line
``{"format", "gen", "bytes", "sha256"}``, then the state), and end events
``[seq, substream, start_ms, end_ms]`` in ``ends/<first seq>.jsonl``.
"""

from __future__ import annotations

import bisect
import hashlib
import json
import logging
import re
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from spark_ext.local_files import (
    append_synced,
    fsync_dir,
    listdir,
    read_from,
    replace_synced,
    truncate,
)
from spark_ext.tracker.errors import TrackerLogCorrupt

__all__ = ["SEGMENT_EVENTS", "EndSegments", "log_generations", "log_name"]

log = logging.getLogger(__name__)

SNAPSHOT_FORMAT = 1
#: End events per segment file of ``ends/``.
SEGMENT_EVENTS = 10_000
ENDS_DIR = "ends"

_LOG_RE = re.compile(r"tracker\.(\d{8})\.log")
_SNAP_RE = re.compile(r"snapshot\.(\d{8})\.json")
_ENDS_RE = re.compile(r"(\d{12})\.jsonl")


def log_name(gen: int) -> str:
    """File name of log segment ``gen`` (0 is the pre-compaction name ``tracker.log``)."""
    return "tracker.log" if gen == 0 else f"tracker.{gen:08d}.log"


def snapshot_name(gen: int) -> str:
    return f"snapshot.{gen:08d}.json"


def log_generations(folder: Path) -> list[int]:
    """Generations of the log segments in ``folder``, ascending."""
    names = listdir(folder)
    gens = [int(m.group(1)) for n in names if (m := _LOG_RE.fullmatch(n))]
    return sorted(gens + ([0] if "tracker.log" in names else []))


def snapshot_generations(folder: Path) -> list[int]:
    """Generations of the snapshot files in ``folder`` (valid or not), ascending."""
    return sorted(int(m.group(1)) for n in listdir(folder) if (m := _SNAP_RE.fullmatch(n)))


def write_snapshot(folder: Path, gen: int, body: dict[str, Any]) -> int:
    """Write snapshot ``gen`` atomically (temp file, fsync, rename, fsync folder); its size."""
    data = json.dumps(body, sort_keys=True, separators=(",", ":")).encode()
    header = {
        "format": SNAPSHOT_FORMAT,
        "gen": gen,
        "bytes": len(data),
        "sha256": hashlib.sha256(data).hexdigest(),
    }
    blob = json.dumps(header, sort_keys=True).encode() + b"\n" + data
    replace_synced(folder / snapshot_name(gen), blob)
    return len(blob)


def newest_snapshot(folder: Path) -> tuple[int, dict[str, Any], int] | None:
    """``(gen, body, bytes read)`` of the newest whole snapshot (a torn or unreadable one is
    skipped), None when there is none."""
    for gen in reversed(snapshot_generations(folder)):
        path = folder / snapshot_name(gen)
        try:
            blob = path.read_bytes()
            head, _, data = blob.partition(b"\n")
            header = json.loads(head)
            if (
                header.get("format") != SNAPSHOT_FORMAT
                or header.get("bytes") != len(data)
                or header.get("sha256") != hashlib.sha256(data).hexdigest()
            ):
                raise ValueError("length or checksum does not match the header")
            return gen, json.loads(data), len(blob)
        except (OSError, ValueError) as e:  # JSONDecodeError is a ValueError
            log.warning("tracker snapshot %s is not whole (%s): ignored", path, e)
    return None


def trim(folder: Path, below: int) -> None:
    """Delete snapshots and log segments of generations below ``below``."""
    for gen in snapshot_generations(folder):
        if gen < below:
            (folder / snapshot_name(gen)).unlink(missing_ok=True)
    for gen in log_generations(folder):
        if gen < below:
            (folder / log_name(gen)).unlink(missing_ok=True)
    fsync_dir(folder)


class EndSegments:
    """The ``ends/`` folder, :data:`SEGMENT_EVENTS` end events a file. Appends hold the agent's
    lock; reads need none (a line without its newline is not read)."""

    def __init__(self, folder: Path) -> None:
        self.dir = folder / ENDS_DIR
        #: ``(segment path, its size, last seq, events)`` as last read (valid while the size is).
        self._tail: tuple[Path, int, int, int] | None = None

    def firsts(self) -> list[int]:
        """First sequence numbers of the segments, ascending."""
        if not self.dir.is_dir():
            return []
        return sorted(int(m.group(1)) for n in listdir(self.dir) if (m := _ENDS_RE.fullmatch(n)))

    def _path(self, first: int) -> Path:
        return self.dir / f"{first:012d}.jsonl"

    def last(self) -> tuple[int, int]:
        """``(last seq stored, events in the last segment)``; a torn tail is dropped."""
        firsts = self.firsts()
        if not firsts:
            return 0, 0
        path = self._path(firsts[-1])
        if self._tail is not None and self._tail[0] == path:
            if path.stat().st_size == self._tail[1]:
                return self._tail[2], self._tail[3]
        data = path.read_bytes()
        whole = data.rfind(b"\n") + 1
        if whole < len(data):
            log.warning("tracker end events %s: dropping a torn last line", path)
            truncate(path, whole)
        lines = data[:whole].splitlines()
        last = int(json.loads(lines[-1])[0]) if lines else firsts[-1] - 1
        self._tail = (path, whole, last, len(lines))
        return last, len(lines)

    def append(self, events: Sequence[Sequence[Any]]) -> None:
        """Append events (ascending seq, each after the last stored one), fsync-ed."""
        if not events:
            return
        self.dir.mkdir(exist_ok=True)
        last, count = self.last()
        if int(events[0][0]) != last + 1:
            raise TrackerLogCorrupt(
                f"{self.dir}: end event {events[0][0]} appended after {last} (not next)"
            )
        firsts, new_file, done = self.firsts(), False, 0
        while done < len(events):
            if not firsts or count >= SEGMENT_EVENTS:  # a new segment from this event on
                firsts, count, new_file = [int(events[done][0])], 0, True
            chunk = events[done : done + SEGMENT_EVENTS - count]
            lines = [json.dumps(list(e), separators=(",", ":")).encode() + b"\n" for e in chunk]
            path = self._path(firsts[-1])
            count, done = count + len(chunk), done + len(chunk)
            self._tail = (path, append_synced(path, b"".join(lines)), int(chunk[-1][0]), count)
        if new_file:
            fsync_dir(self.dir)

    def read(self, after: int, up_to: int) -> Iterator[list[Any]]:
        """Stored events with ``after < seq <= up_to``, in order (from one segment on)."""
        if up_to <= after:
            return
        firsts = self.firsts()
        i = max(0, bisect.bisect_right(firsts, after + 1) - 1)
        for first in firsts[i:]:
            if first > up_to:
                return
            for raw in read_from(self._path(first)).splitlines(keepends=True):
                if not raw.endswith(b"\n"):
                    return  # being written (or torn): not committed to readers yet
                e = json.loads(raw)
                if int(e[0]) > up_to:
                    return
                if int(e[0]) > after:
                    yield e
