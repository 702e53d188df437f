"""The tracking agents' interface and the local agent: apply reports once, keep end events.

The local agent's folder, its steps 1-6 and what a kill at each leaves: docs/design.md, "Tracker".
"""

from __future__ import annotations

import copy
import json
import logging
import os
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import Any

from spark_ext.crash import declare
from spark_ext.local_files import append_synced, file_lock, local_folder, read_from, truncate
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
    apply_step,
    declare_step,
    replay_record,
)

__all__ = ["EndEvent", "LocalTrackingAgent", "TrackerFigures", "TrackerState", "TrackingAgent"]

BEFORE_APPEND = declare("tracker.agent.before_append", "driver", "reports accepted, not appended")
AFTER_APPEND = declare(
    "tracker.agent.after_append", "driver", "record appended to the log, end events to their files"
)
BEFORE_ENDS = declare(
    "tracker.agent.before_ends", "driver", "record appended, end events not in their files"
)
BEFORE_SNAPSHOT = declare(
    "tracker.agent.before_snapshot", "driver", "compaction due, snapshot not written"
)
AFTER_SNAPSHOT = declare(
    "tracker.agent.after_snapshot", "driver", "snapshot written, covered segments not deleted"
)

#: Compaction defaults: a snapshot after this many log records or bytes since the last one.
SNAPSHOT_EVERY = 1000
SNAPSHOT_BYTES = 4 << 20

log = logging.getLogger(__name__)

#: ``build(state)``: mutates the state, returns ``(log record, end events)`` or None (no change).
Build = Callable[[TrackerState], tuple[dict[str, Any], list[EndEvent]] | None]


class TrackingAgent(ABC):
    """Where reports go and end events come from. Implementations must be durable; they compact
    after ``snapshot_every`` log records or ``snapshot_bytes`` of log since the last snapshot."""

    def __init__(self, snapshot_every: int | None, snapshot_bytes: int | None) -> None:
        self.snapshot_every = SNAPSHOT_EVERY if snapshot_every is None else snapshot_every
        self.snapshot_bytes = SNAPSHOT_BYTES if snapshot_bytes is None else snapshot_bytes
        self._state = TrackerState()
        self._since_records = 0  # log records since the newest snapshot
        self._since_bytes = 0
        #: What the last (re)load read: ``snapshot_bytes``, ``log_bytes``, ``records``.
        self.load_figures: dict[str, int] = {}

    def _snapshot_due(self, records: int = 0, size: int = 0) -> bool:
        """A snapshot is due with ``records`` more log records of ``size`` bytes."""
        return (
            self._since_records + records >= self.snapshot_every
            or self._since_bytes + size >= self.snapshot_bytes
        )

    def _loaded(self, snapshot_bytes: int) -> None:
        """Record what a (re)load read: the snapshot and the log records since it."""
        self.load_figures = {
            "snapshot_bytes": snapshot_bytes,
            "log_bytes": self._since_bytes,
            "records": self._since_records,
        }

    def declare(self, namespace: str, sources: Iterable[str] = ()) -> None:
        """Say which source partitions close substreams of ``namespace`` (idempotent)."""
        srcs = tuple(sorted(sources))
        self._transact(lambda state: declare_step(state, namespace, srcs), None)

    def apply(self, reports: Sequence[Report]) -> list[EndEvent]:
        """Apply reports not applied before; return the end events they caused."""
        batch = min((r.key.batch for r in reports), default=None)
        ends = self._transact(lambda state: apply_step(state, reports), batch)
        for e in ends:
            log.info("substream %s ended (seq %d)", e.substream, e.seq)
        return ends

    @abstractmethod
    def _transact(self, build: Build, batch: int | None) -> list[EndEvent]:
        """Run ``build`` on the caught-up state and make its record durable (steps 1-6)."""

    @abstractmethod
    def source_options(self) -> dict[str, str]:
        """Options of the ``spark_ext_tracker`` streaming source that read this agent."""

    @abstractmethod
    def _locked(self) -> AbstractContextManager[Any]:
        """The agent's lock (other processes' or threads' writes wait)."""

    @abstractmethod
    def _catch_up(self) -> None:
        """Fold into the state what was written since it was read (lock held)."""

    @contextmanager
    def _synced(self) -> Iterator[TrackerState]:
        """The live state, caught up with the log, under the agent's lock."""
        with self._locked():
            self._catch_up()
            yield self._state

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
    """The agent in a local folder (created if missing), safe for several processes of one
    machine."""

    def __init__(
        self,
        folder: str | os.PathLike[str],
        snapshot_every: int | None = None,
        snapshot_bytes: int | None = None,
    ) -> None:
        # what to use off the local disk (no file lock there)
        elsewhere = "KafkaTrackingAgent (spark_ext.tracker) for queries on object storage"
        self.folder = local_folder(folder, "LocalTrackingAgent(folder)", elsewhere)
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise TrackerUnavailable(f"cannot create tracker folder {self.folder}: {e}") from e
        super().__init__(snapshot_every, snapshot_bytes)
        self._ends_files = EndSegments(self.folder)
        self._base = 0  # generation of the snapshot the state was loaded from (0: none)
        self._gen = 0  # log segment read and appended to
        self._offset = 0  # bytes of it folded into the state
        with self._locked():
            self._load()

    @property
    def path(self) -> Path:
        """The log segment being appended to."""
        return self.folder / log_name(self._gen)

    # -- log ------------------------------------------------------------------------------
    def _locked(self) -> AbstractContextManager[None]:
        return file_lock(self.folder / "tracker.lock")

    def _load(self) -> None:
        """State from the newest whole snapshot and the log segments after it (lock held)."""
        found = newest_snapshot(self.folder)
        if found is None:
            self._state, self._base, snap_bytes = TrackerState(), 0, 0
        else:
            self._base, body, snap_bytes = found
            self._state = TrackerState.from_dict(body["state"])
        self._since_records = self._since_bytes = 0
        newest = max(
            [self._base, *log_generations(self.folder), *snapshot_generations(self.folder)]
        )
        ends: list[EndEvent] = []
        for gen in range(self._base, newest + 1):
            self._gen, self._offset = gen, 0
            ends.extend(self._read_segment())
        self.path.touch(exist_ok=True)
        self._loaded(snap_bytes)
        self._store_ends(ends)

    def _read_segment(self) -> list[EndEvent]:
        """Fold the records of the current segment past our offset; their end events."""
        try:
            data = read_from(self.path, self._offset)
        except FileNotFoundError:
            return []  # a compaction died before creating it: empty
        ends: list[EndEvent] = []
        pos = 0
        while pos < len(data):
            nl = data.find(b"\n", pos)
            if nl < 0:  # torn tail: a writer died mid-append (we hold the lock)
                log.warning("tracker log %s: dropping a torn last record", self.path)
                truncate(self.path, self._offset + pos)
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
        last, _ = self._ends_files.last()
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
        append_synced(self.path, line)
        self._offset += len(line)
        self._since_records += 1
        self._since_bytes += len(line)

    def _compact_if_due(self, batch: int | None) -> None:
        """Step 6: snapshot, new segment, delete what the previous snapshot covered."""
        if not self._snapshot_due():
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

    # -- TrackingAgent ---------------------------------------------------------------------
    def _transact(self, build: Build, batch: int | None) -> list[EndEvent]:
        with self._locked():
            self._catch_up()
            try:
                built = build(self._state)
                if built is None:
                    return []
                record, ends = built
                if batch is None:  # a declaration: no fault point, no compaction
                    self._append(record)
                    return ends
                BEFORE_APPEND.reached(batch)
                self._append(record)
                BEFORE_ENDS.reached(batch)
                self._ends_files.append([e.to_list() for e in ends])
                AFTER_APPEND.reached(batch)
                self._compact_if_due(batch)
            except BaseException:
                self._load()  # the log, not memory, says what was applied
                raise
        return ends

    def source_options(self) -> dict[str, str]:
        return {"agent": "local", "path": str(self.folder)}

    def _read_ends(self, after_seq: int, up_to_seq: int) -> list[EndEvent]:
        """Every end event in the range from the files, or :class:`TrackerLogCorrupt`."""
        if up_to_seq <= after_seq:
            return []
        got = [EndEvent.from_list(v) for v in self._ends_files.read(after_seq, up_to_seq)]
        if [e.seq for e in got] != list(range(after_seq + 1, up_to_seq + 1)):
            have = f"{got[0].seq}..{got[-1].seq} ({len(got)})" if got else "none"
            raise TrackerLogCorrupt(
                f"{self.folder}: end events {after_seq + 1}..{up_to_seq} expected, {have} found"
            )
        return got
