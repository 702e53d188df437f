"""The tracking agents' interface and the local agent: apply reports once, keep end events.

:class:`LocalTrackingAgent` keeps an fsync-ed JSON-lines log, snapshots and end-event
segments in one folder; its steps 1-6 and what a kill at each leaves are in docs/design.md,
"Tracker". The decision itself is the pure :class:`~spark_ext.tracker.state.TrackerState`.

Example
-------
>>> agent = LocalTrackingAgent(tmp_path)                         # doctest: +SKIP
>>> agent.declare("counts", sources=["events:0", "events:1"])    # doctest: +SKIP
>>> agent.apply(reports)  # -> [EndEvent(seq=1, substream='counts/0/10000', ...)]  # doctest: +SKIP
"""

from __future__ import annotations

import copy
import fcntl
import json
import logging
import os
from abc import ABC, abstractmethod
from collections.abc import Iterable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import Any

from spark_ext.crash import declare
from spark_ext.tracker.errors import TrackerLogCorrupt, TrackerUnavailable
from spark_ext.tracker.reports import Report
from spark_ext.tracker.snapshot import (
    EndSegments,
    fsync_dir,
    log_generations,
    log_name,
    newest_snapshot,
    snapshot_generations,
    trim,
    write_snapshot,
)
from spark_ext.tracker.state import (
    EndEvent,
    TrackerFigures,
    TrackerState,
    apply_record,
    declare_record,
    replay_record,
)

__all__ = [
    "EndEvent",
    "LocalTrackingAgent",
    "TrackerFigures",
    "TrackerState",
    "TrackingAgent",
    "apply_record",
    "declare_record",
    "read_end_events",
    "replay_record",
]

log = logging.getLogger(__name__)

#: Fault points of the local agent's append of a batch's reports to its log.
BEFORE_APPEND = declare("tracker.agent.before_append", "driver", "reports accepted, not appended")
AFTER_APPEND = declare(
    "tracker.agent.after_append", "driver", "record appended to the log, end events to their files"
)
#: Fault points of the local agent's compaction (step 6) and end-event files (step 5).
BEFORE_ENDS = declare(
    "tracker.agent.before_ends", "driver", "record appended, end events not in their files"
)
BEFORE_SNAPSHOT = declare(
    "tracker.agent.before_snapshot", "driver", "compaction due, snapshot not written"
)
AFTER_SNAPSHOT = declare(
    "tracker.agent.after_snapshot", "driver", "snapshot written, covered segments not deleted"
)

LOG_NAME = log_name(0)
#: Compaction defaults: a snapshot after this many log records or bytes since the last one.
SNAPSHOT_EVERY = 1000
SNAPSHOT_BYTES = 4 << 20


class TrackingAgent(ABC):
    """Where reports go and end events come from. Implementations must be durable."""

    @abstractmethod
    def declare(self, namespace: str, sources: Iterable[str] = ()) -> None:
        """Say which source partitions close substreams of ``namespace`` (idempotent)."""

    @abstractmethod
    def apply(self, reports: Sequence[Report]) -> list[EndEvent]:
        """Apply reports not applied before; return the end events they caused."""

    @abstractmethod
    def source_options(self) -> dict[str, str]:
        """Options of the ``spark_ext_tracker`` streaming source that read this agent."""

    @abstractmethod
    def _synced(self) -> AbstractContextManager[TrackerState]:
        """The live state, caught up with the log, under the agent's lock."""

    @abstractmethod
    def _read_ends(self, after_seq: int, up_to_seq: int) -> list[EndEvent]:
        """End events ``(after_seq, up_to_seq]`` from where they are kept, all of them."""

    def last_seq(self) -> int:
        """The sequence number of the newest end event (0 for none)."""
        with self._synced() as state:
            return state.seq

    def end_events(self, after_seq: int, up_to_seq: int) -> list[EndEvent]:
        """End events with ``after_seq < seq <= up_to_seq``, in order."""
        with self._synced() as state:
            last = state.seq
        return self._read_ends(after_seq, min(up_to_seq, last))

    def state(self) -> TrackerState:
        """A copy of the current state (for metrics and tests)."""
        with self._synced() as state:
            return copy.deepcopy(state)

    def figures(self) -> TrackerFigures:
        """The agent's state-size figures (no copy of the state)."""
        with self._synced() as state:
            return state.figures()

    def frontier(self, namespace: str) -> tuple[dict[str, int], int | None]:
        """:meth:`TrackerState.frontier` (no copy of the state: the idle policy asks every batch)."""
        with self._synced() as state:
            return state.frontier(namespace)


class LocalTrackingAgent(TrackingAgent):
    """The embedded agent on local disk, safe for several processes of one machine.

    Parameters
    ----------
    folder
        The agent's folder (created if missing).
    snapshot_every
        Compact after this many log records since the last snapshot (default
        :data:`SNAPSHOT_EVERY`).
    snapshot_bytes
        ... or after this many log bytes since the last snapshot, whichever comes first
        (default :data:`SNAPSHOT_BYTES`).
    """

    def __init__(
        self,
        folder: str | os.PathLike[str],
        snapshot_every: int | None = None,
        snapshot_bytes: int | None = None,
    ) -> None:
        self.folder = Path(folder)
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise TrackerUnavailable(f"cannot create tracker folder {self.folder}: {e}") from e
        self.snapshot_every = SNAPSHOT_EVERY if snapshot_every is None else snapshot_every
        self.snapshot_bytes = SNAPSHOT_BYTES if snapshot_bytes is None else snapshot_bytes
        self._ends_files = EndSegments(self.folder)
        self._state = TrackerState()
        self._base = 0  # generation of the snapshot the state was loaded from (0: none)
        self._gen = 0  # log segment read and appended to
        self._offset = 0  # bytes of it folded into the state
        self._since_records = 0  # log records since the snapshot
        self._since_bytes = 0
        #: What the last (re)load read: ``snapshot_bytes``, ``log_bytes``, ``records``.
        self.load_figures: dict[str, int] = {}
        with self._locked():
            self._load()

    @property
    def path(self) -> Path:
        """The log segment being appended to."""
        return self.folder / log_name(self._gen)

    # -- log ------------------------------------------------------------------------------
    def _locked(self) -> _FileLock:
        return _FileLock(self.folder / "tracker.lock")

    def _load(self) -> None:
        """State from the newest whole snapshot and the log segments after it (lock held)."""
        found = newest_snapshot(self.folder)
        if found is None:
            self._state, self._base, snap_bytes = TrackerState(), 0, 0
        else:
            self._base, body, snap_bytes = found
            self._state = TrackerState.from_dict(body["state"])
        self._since_records = self._since_bytes = 0
        newest = max([self._base, *log_generations(self.folder)])
        newest = max([newest, *snapshot_generations(self.folder)])
        ends: list[EndEvent] = []
        for gen in range(self._base, newest + 1):
            self._gen, self._offset = gen, 0
            ends.extend(self._read_segment())
        self.path.touch(exist_ok=True)
        self.load_figures = {
            "snapshot_bytes": snap_bytes,
            "log_bytes": self._since_bytes,
            "records": self._since_records,
        }
        self._store_ends(ends)

    def _read_segment(self) -> list[EndEvent]:
        """Fold the records of the current segment past our offset; their end events."""
        try:
            with open(self.path, "rb") as f:
                f.seek(self._offset)
                data = f.read()
        except FileNotFoundError:
            return []  # a compaction died before creating it: empty
        ends: list[EndEvent] = []
        pos = 0
        while pos < len(data):
            nl = data.find(b"\n", pos)
            if nl < 0:  # torn tail: a writer died mid-append (we hold the lock)
                log.warning("tracker log %s: dropping a torn last record", self.path)
                with open(self.path, "r+b") as f:
                    f.truncate(self._offset + pos)
                break
            try:
                record = json.loads(data[pos:nl])
            except json.JSONDecodeError as e:
                raise TrackerLogCorrupt(f"{self.path} at byte {self._offset + pos}: {e}") from e
            ends.extend(replay_record(self._state, record))
            self._since_records += 1
            self._since_bytes += nl + 1 - pos
            pos = nl + 1
        self._offset += pos
        return ends

    def _store_ends(self, ends: Sequence[EndEvent]) -> None:
        """Append to the end-event files those of ``ends`` they lack (a writer died)."""
        if not ends:
            return
        last, _ = self._ends_files.last(repair=True)
        missing = [e.to_list() for e in ends if e.seq > last]
        if missing:
            log.info("tracker %s: %d end events restored from the log", self.folder, len(missing))
            self._ends_files.append(missing)

    def _catch_up(self) -> None:
        """Fold what other processes appended (or reload after their compaction); lock held."""
        if max(snapshot_generations(self.folder), default=0) > self._gen:
            self._load()  # another process compacted: its snapshot holds what we missed
            return
        self._store_ends(self._read_segment())

    def _append(self, record: dict[str, Any]) -> None:
        line = (json.dumps(record, sort_keys=True, separators=(",", ":")) + "\n").encode()
        with open(self.path, "ab") as f:
            f.write(line)
            f.flush()
            os.fsync(f.fileno())
        self._offset += len(line)
        self._since_records += 1
        self._since_bytes += len(line)

    def _compact_if_due(self, batch: int | None) -> None:
        """Step 6: snapshot, new segment, delete what the previous snapshot covered."""
        if self._since_records < self.snapshot_every and self._since_bytes < self.snapshot_bytes:
            return
        BEFORE_SNAPSHOT.reached(batch)
        gen = self._gen + 1
        write_snapshot(self.folder, gen, {"state": self._state.to_dict()})
        AFTER_SNAPSHOT.reached(batch)
        previous = self._base
        self._base, self._gen, self._offset = gen, gen, 0
        self._since_records = self._since_bytes = 0
        self.path.touch(exist_ok=True)
        fsync_dir(self.folder)
        trim(self.folder, previous)  # keep the previous snapshot: the fallback of a torn one

    def compact(self) -> None:
        """Compact now (snapshot and new segment), whatever the thresholds."""
        with self._locked():
            self._catch_up()
            every, self.snapshot_every = self.snapshot_every, 0
            try:
                self._compact_if_due(None)
            except BaseException:
                self._load()
                raise
            finally:
                self.snapshot_every = every

    # -- TrackingAgent ---------------------------------------------------------------------
    def declare(self, namespace: str, sources: Iterable[str] = ()) -> None:
        srcs = tuple(sorted(sources))
        with self._locked():
            self._catch_up()
            if self._state.sources.get(namespace) == srcs:
                return
            try:
                self._append(declare_record(namespace, srcs))
            except BaseException:
                self._load()
                raise
            self._state.declare(namespace, srcs)

    def apply(self, reports: Sequence[Report]) -> list[EndEvent]:
        with self._locked():
            self._catch_up()
            accepted = self._state.accept(reports)
            if not accepted:
                return []
            ends = self._state.settle()
            batch = accepted[0].key.batch
            try:
                BEFORE_APPEND.reached(batch)
                self._append(apply_record(accepted, ends))
                BEFORE_ENDS.reached(batch)
                self._ends_files.append([e.to_list() for e in ends])
                AFTER_APPEND.reached(batch)
                self._compact_if_due(batch)
            except BaseException:
                self._load()  # the log, not memory, says what was applied
                raise
        for e in ends:
            log.info("substream %s ended (seq %d)", e.substream, e.seq)
        return ends

    def source_options(self) -> dict[str, str]:
        return {"agent": "local", "path": str(self.folder)}

    @contextmanager
    def _synced(self) -> Iterator[TrackerState]:
        with self._locked():
            self._catch_up()
            yield self._state

    def _read_ends(self, after_seq: int, up_to_seq: int) -> list[EndEvent]:
        return _checked(self.folder, after_seq, up_to_seq)


def _checked(folder: Path, after: int, up_to: int) -> list[EndEvent]:
    """Every end event in ``(after, up_to]`` from the files, or :class:`TrackerLogCorrupt`."""
    if up_to <= after:
        return []
    got = [EndEvent.from_list(v) for v in EndSegments(folder).read(after, up_to)]
    if [e.seq for e in got] != list(range(after + 1, up_to + 1)):
        have = f"{got[0].seq}..{got[-1].seq} ({len(got)})" if got else "none"
        raise TrackerLogCorrupt(f"{folder}: end events {after + 1}..{up_to} expected, {have} found")
    return got


def read_end_events(
    folder: str | os.PathLike[str], after_seq: int, up_to_seq: int
) -> Iterator[EndEvent]:
    """End events of a local agent's folder without building its state (used by the source).

    Reads the end-event segment holding ``after_seq + 1`` on (never the history). Events
    ``up_to_seq`` asks for and the files lack raise :class:`TrackerLogCorrupt`; a folder of
    an older version (no end-event files yet) is opened once as an agent, which writes them.
    """
    path = Path(folder)
    if not EndSegments(path).exists() and up_to_seq > after_seq:
        LocalTrackingAgent(path).last_seq()  # migrates an uncompacted log
    yield from _checked(path, after_seq, up_to_seq)


class _FileLock:
    def __init__(self, path: Path) -> None:
        self.path = path
        self._fd = -1

    def __enter__(self) -> _FileLock:
        self._fd = os.open(self.path, os.O_CREAT | os.O_RDWR, 0o644)
        fcntl.flock(self._fd, fcntl.LOCK_EX)
        return self

    def __exit__(self, *exc: object) -> None:
        fcntl.flock(self._fd, fcntl.LOCK_UN)
        os.close(self._fd)
