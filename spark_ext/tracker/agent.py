"""The tracking agent: applies XOR reports once, declares substreams ended, numbers end events.

A substream has ended when (1) its source has closed it -- every source partition of its
namespace is closed past the substream's end (ordered progress or a producer's close
marker), or an upstream query closed it explicitly -- and (2) its running XOR is 0 and its
element count balances: every element sent was also finished. Each end event gets the next
sequence number; those numbers are the offsets of :mod:`spark_ext.tracker.source`.

Durability: :class:`LocalTrackingAgent` keeps one append-only JSON-lines log. Applying a
batch of reports is ONE log record holding the accepted reports *and* the end events they
caused, written and fsync-ed before the in-memory state is used, so:

1. the agent reads the log (catching up with other writers under an exclusive file lock);
2. drops reports whose key it has applied (per ``(query, stage, partition)`` it remembers the
   highest batch applied: a replayed batch or a re-sent report is a duplicate);
3. folds the rest into the state and computes the end events they cause;
4. appends one record (reports + end events) and fsyncs it       -- crash point
   ``tracker.agent.before_append`` / ``tracker.agent.after_append``;
5. returns the end events.

A kill before step 4 loses nothing (the sender re-sends: the micro-batch is replayed); a
kill during step 4 leaves a torn last line that the next open discards (same); a kill after
it means a re-sent report is a duplicate and yields no second end event.

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
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from spark_ext.crash import declare
from spark_ext.tracker.errors import TrackerLogCorrupt, TrackerUnavailable
from spark_ext.tracker.reports import Report, ReportKey
from spark_ext.tracker.substreams import Substream

log = logging.getLogger(__name__)

#: Fault points of the local agent's append of a batch's reports to its log.
BEFORE_APPEND = declare("tracker.agent.before_append", "driver", "reports accepted, not appended")
AFTER_APPEND = declare("tracker.agent.after_append", "driver", "reports appended to the log")

LOG_NAME = "tracker.log"


@dataclass(frozen=True, order=True)
class EndEvent:
    """Substream ``substream`` has ended; ``seq`` numbers end events 1, 2, 3, ..."""

    seq: int
    substream: str
    start_ms: int
    end_ms: int

    @property
    def namespace(self) -> str:
        return Substream.parse(self.substream).namespace

    def to_list(self) -> list[Any]:
        return [self.seq, self.substream, self.start_ms, self.end_ms]

    @classmethod
    def from_list(cls, v: Sequence[Any]) -> EndEvent:
        return cls(int(v[0]), str(v[1]), int(v[2]), int(v[3]))


@dataclass(frozen=True)
class TrackerFigures:
    """The agent's state size (docs/design.md invariant 4: state is bounded and measured).

    Attributes
    ----------
    open_substreams
        Substreams seen and not ended (bounded by the windows between the oldest source
        partition's progress and the newest event time).
    in_flight
        Elements sent and not yet finished, over all open substreams.
    ended
        Substreams ended so far (a count: the state keeps one released frontier per
        namespace, not every ended substream).
    late_reports
        Reports that touched an already-ended substream (broken close promises).
    last_seq
        The newest end event's sequence number.
    """

    open_substreams: int
    in_flight: int
    ended: int
    late_reports: int
    last_seq: int

    def line(self) -> str:
        return (
            f"tracker: {self.open_substreams} open substreams, {self.in_flight} in flight, "
            f"{self.ended} ended (last seq {self.last_seq}), {self.late_reports} late reports"
        )


@dataclass
class TrackerState:
    """The agent's state as a pure value: reports in, end events out (no I/O).

    ``sources`` maps a namespace to the source partitions that must close a substream of it;
    a namespace without sources ends substreams on explicit closes only (upstream queries).
    """

    sources: dict[str, tuple[str, ...]] = field(default_factory=dict)
    high_water: dict[tuple[str, str, int], int] = field(default_factory=dict)
    xors: dict[str, int] = field(default_factory=dict)
    counts: dict[str, int] = field(default_factory=dict)
    ends: dict[str, int] = field(default_factory=dict)
    closed: set[str] = field(default_factory=set)
    progress: dict[str, int] = field(default_factory=dict)
    #: Namespace -> (end_ms, id) of its newest ended substream. Substreams of a namespace
    #: end in (end, id) order, so everything at or below it has ended (or never will be
    #: open again: a report for it is late). Bounded: one entry per namespace.
    released: dict[str, tuple[int, str]] = field(default_factory=dict)
    ended_counts: dict[str, int] = field(default_factory=dict)
    seq: int = 0
    late_reports: int = 0

    def declare(self, namespace: str, sources: Iterable[str] = ()) -> None:
        self.sources[namespace] = tuple(sorted(sources))

    def last_batch(self, query: str) -> int | None:
        """The highest batch of ``query`` whose reports were applied (None: none)."""
        batches = [b for (q, _, _), b in self.high_water.items() if q == query]
        return max(batches) if batches else None

    def is_duplicate(self, key: ReportKey) -> bool:
        return key.batch <= self.high_water.get(key.stream, -1)

    def accept(self, reports: Iterable[Report]) -> list[Report]:
        """Fold every report not applied before into the state; returns the accepted ones."""
        accepted = []
        for r in sorted(reports, key=lambda r: r.key):
            if self.is_duplicate(r.key):
                log.info("report %s already applied: ignored", r.key)
                continue
            self.high_water[r.key.stream] = r.key.batch
            self._fold(r)
            accepted.append(r)
        return accepted

    def is_ended(self, substream: str) -> bool:
        """``substream`` is at or below its namespace's released frontier."""
        sub = Substream.parse(substream)
        r = self.released.get(sub.namespace)
        return r is not None and (sub.end_ms, substream) <= r

    def _fold(self, r: Report) -> None:
        b = r.body
        for s, x in b.xors.items():
            if self.is_ended(s):
                self.late_reports += 1
                log.warning("report %s touches ended substream %s (late element)", r.key, s)
                continue
            self.xors[s] = self.xors.get(s, 0) ^ x
        for s, c in b.counts.items():
            if not self.is_ended(s):
                self.counts[s] = self.counts.get(s, 0) + c
        for s, e in b.ends.items():
            if not self.is_ended(s):
                self.ends.setdefault(s, e)
        for p, t in b.progress.items():
            self.progress[p] = max(self.progress.get(p, t), t)
        self.closed |= {s for s in b.closes if not self.is_ended(s)}

    def source_closed(self, substream: str) -> bool:
        if substream in self.closed:
            return True
        ns = Substream.parse(substream).namespace
        srcs = self.sources.get(ns)
        if not srcs:
            return False
        end = self.ends[substream]
        return all(self.progress.get(p, -(2**63)) >= end for p in srcs)

    def open_substreams(self) -> list[str]:
        """Substreams seen and not ended, in (end time, id) order."""
        return sorted(self.ends, key=lambda s: (self.ends[s], s))

    def settle(self) -> list[EndEvent]:
        """End every open substream that is closed and balanced; number the events.

        Substreams of one namespace end in (end time, id) order: an end event at ``end_ms``
        also says every substream of its namespace ending earlier has ended, which is what
        per-shard operators (sessions, EWMA) rely on.
        """
        events = []
        blocked: set[str] = set()
        for s in self.open_substreams():
            ns = Substream.parse(s).namespace
            if ns in blocked:
                continue
            if self.xors.get(s, 0) != 0 or self.counts.get(s, 0) != 0 or not self.source_closed(s):
                blocked.add(ns)  # substreams of a namespace end in end-time order
            else:
                self.seq += 1
                sub = Substream.parse(s)
                events.append(EndEvent(self.seq, s, sub.start_ms, sub.end_ms))
                self._forget(s, self.seq)
        return events

    def replay_ends(self, events: Iterable[EndEvent]) -> None:
        """Re-apply end events read from the log (recovery; they are not computed again)."""
        for e in events:
            self.seq = max(self.seq, e.seq)
            self._forget(e.substream, e.seq)

    def _forget(self, s: str, seq: int) -> None:
        sub = Substream.parse(s)
        mark = (sub.end_ms, s)
        if mark > self.released.get(sub.namespace, (-(2**63), "")):
            self.released[sub.namespace] = mark
        self.ended_counts[sub.namespace] = self.ended_counts.get(sub.namespace, 0) + 1
        self.xors.pop(s, None)
        self.counts.pop(s, None)
        self.ends.pop(s, None)
        self.closed.discard(s)

    def in_flight(self) -> dict[str, int]:
        """Open substreams -> elements sent but not finished (state size metric)."""
        return {s: self.counts.get(s, 0) for s in self.open_substreams()}

    def figures(self) -> TrackerFigures:
        """The state-size figures (no copy of the state)."""
        return TrackerFigures(
            open_substreams=len(self.ends),
            in_flight=sum(self.counts.get(s, 0) for s in self.ends),
            ended=sum(self.ended_counts.values()),
            late_reports=self.late_reports,
            last_seq=self.seq,
        )


def declare_record(namespace: str, sources: Sequence[str]) -> dict[str, Any]:
    """The log record of a namespace declaration (same in every agent's log)."""
    return {"t": "declare", "ns": namespace, "sources": list(sources)}


def apply_record(accepted: Sequence[Report], ends: Sequence[EndEvent]) -> dict[str, Any]:
    """The log record of one apply: the reports accepted and the end events they caused."""
    return {
        "t": "apply",
        "reports": [r.to_dict() for r in accepted],
        "ends": [e.to_list() for e in ends],
    }


def replay_record(state: TrackerState, record: dict[str, Any]) -> list[EndEvent]:
    """Fold one log record into ``state`` (recovery); returns the end events it holds."""
    if record["t"] == "declare":
        state.declare(record["ns"], record["sources"])
        return []
    if record["t"] == "apply":
        state.accept(Report.from_dict(r) for r in record["reports"])
        ends = [EndEvent.from_list(e) for e in record["ends"]]
        state.replay_ends(ends)
        return ends
    raise TrackerLogCorrupt(f"unknown tracker log record type {record.get('t')!r}")


class TrackingAgent(ABC):
    """Where reports go and end events come from. Implementations must be durable."""

    @abstractmethod
    def declare(self, namespace: str, sources: Iterable[str] = ()) -> None:
        """Say which source partitions close substreams of ``namespace`` (idempotent)."""

    @abstractmethod
    def apply(self, reports: Sequence[Report]) -> list[EndEvent]:
        """Apply reports not applied before; return the end events they caused."""

    @abstractmethod
    def last_seq(self) -> int:
        """The sequence number of the newest end event (0 for none)."""

    @abstractmethod
    def end_events(self, after_seq: int, up_to_seq: int) -> list[EndEvent]:
        """End events with ``after_seq < seq <= up_to_seq``, in order."""

    @abstractmethod
    def source_options(self) -> dict[str, str]:
        """Options of the ``spark_ext_tracker`` streaming source that read this agent."""

    def state(self) -> TrackerState:
        """A copy of the current state (for metrics and tests)."""
        raise NotImplementedError

    def figures(self) -> TrackerFigures:
        """The agent's state-size figures (override to avoid copying the state)."""
        return self.state().figures()


class LocalTrackingAgent(TrackingAgent):
    """The embedded agent: state rebuilt from an fsync-ed JSON-lines log on local disk.

    Safe for several processes on one machine (an exclusive ``flock`` around each append,
    after catching up with what others appended). The log grows with the number of batches;
    it is not compacted.
    """

    def __init__(self, folder: str | os.PathLike[str]) -> None:
        self.folder = Path(folder)
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise TrackerUnavailable(f"cannot create tracker folder {self.folder}: {e}") from e
        self.path = self.folder / LOG_NAME
        self.path.touch(exist_ok=True)
        self._state = TrackerState()
        self._offset = 0
        self._ends: list[EndEvent] = []
        with self._locked():
            self._catch_up(repair=True)

    # -- log ------------------------------------------------------------------------------
    def _locked(self) -> _FileLock:
        return _FileLock(self.folder / "tracker.lock")

    def _catch_up(self, repair: bool = False) -> None:
        """Read records appended since our offset (by us or another process)."""
        with open(self.path, "rb") as f:
            f.seek(self._offset)
            data = f.read()
        pos = 0
        while pos < len(data):
            nl = data.find(b"\n", pos)
            if nl < 0:  # torn tail: a writer died mid-append (we hold the lock)
                if repair:
                    log.warning("tracker log %s: dropping a torn last record", self.path)
                    with open(self.path, "r+b") as f:
                        f.truncate(self._offset + pos)
                break
            line = data[pos:nl]
            try:
                record = json.loads(line)
            except json.JSONDecodeError as e:
                raise TrackerLogCorrupt(f"{self.path} at byte {self._offset + pos}: {e}") from e
            self._replay(record)
            pos = nl + 1
        self._offset += pos

    def _reload(self) -> None:
        """Rebuild the state from the log (after a failed append; rare, so no copy per apply)."""
        self._state = TrackerState()
        self._offset = 0
        self._ends = []
        self._catch_up(repair=True)

    def _replay(self, record: dict[str, Any]) -> None:
        self._ends.extend(replay_record(self._state, record))

    def _append(self, record: dict[str, Any]) -> None:
        line = (json.dumps(record, sort_keys=True, separators=(",", ":")) + "\n").encode()
        with open(self.path, "ab") as f:
            f.write(line)
            f.flush()
            os.fsync(f.fileno())
        self._offset += len(line)

    # -- TrackingAgent ---------------------------------------------------------------------
    def declare(self, namespace: str, sources: Iterable[str] = ()) -> None:
        srcs = tuple(sorted(sources))
        with self._locked():
            self._catch_up(repair=True)
            if self._state.sources.get(namespace) == srcs:
                return
            self._append(declare_record(namespace, srcs))
            self._state.declare(namespace, srcs)

    def apply(self, reports: Sequence[Report]) -> list[EndEvent]:
        with self._locked():
            self._catch_up(repair=True)
            accepted = self._state.accept(reports)
            if not accepted:
                return []
            ends = self._state.settle()
            batch = accepted[0].key.batch
            try:
                BEFORE_APPEND.reached(batch)
                self._append(apply_record(accepted, ends))
            except BaseException:
                self._reload()  # the log, not memory, says what was applied
                raise
            AFTER_APPEND.reached(batch)
            self._ends.extend(ends)
        for e in ends:
            log.info("substream %s ended (seq %d)", e.substream, e.seq)
        return ends

    def last_seq(self) -> int:
        with self._locked():
            self._catch_up()
            return self._state.seq

    def end_events(self, after_seq: int, up_to_seq: int) -> list[EndEvent]:
        if up_to_seq > (self._ends[-1].seq if self._ends else 0):
            with self._locked():
                self._catch_up()
        return [e for e in self._ends if after_seq < e.seq <= up_to_seq]

    def source_options(self) -> dict[str, str]:
        return {"agent": "local", "path": str(self.folder)}

    def state(self) -> TrackerState:
        with self._locked():
            self._catch_up()
            return copy.deepcopy(self._state)

    def figures(self) -> TrackerFigures:
        with self._locked():
            self._catch_up()
            return self._state.figures()


#: Per log file (device, inode): ``(byte offset, highest seq in the records before it)``,
#: so a reader process that is asked for newer events does not re-read the whole log.
_SCAN_CACHE: dict[tuple[int, int], tuple[int, int]] = {}


def read_end_events(
    folder: str | os.PathLike[str], after_seq: int, up_to_seq: int
) -> Iterator[EndEvent]:
    """End events of a local agent's log without building its state (used by the source).

    Resumes from where this process's last read ended when the range starts past it.
    """
    with open(Path(folder) / LOG_NAME, "rb") as f:
        st = os.fstat(f.fileno())
        ident = (st.st_dev, st.st_ino)
        pos, seen = _SCAN_CACHE.get(ident, (0, 0))
        if after_seq < seen or pos > st.st_size:
            pos, seen = 0, 0
        f.seek(pos)
        for raw in f:
            if not raw.endswith(b"\n"):
                break
            record = json.loads(raw)
            pos += len(raw)
            ends = [EndEvent.from_list(v) for v in record["ends"]] if record["t"] == "apply" else []
            seen = max([seen, *(e.seq for e in ends)])
            _SCAN_CACHE[ident] = (pos, seen)
            for e in ends:
                if after_seq < e.seq <= up_to_seq:
                    yield e
            if seen >= up_to_seq:
                return


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
