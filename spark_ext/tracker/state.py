"""The tracker's state as a pure value: reports in, end events out (docs/design.md, "Tracker")."""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, fields
from typing import Any

from spark_ext.tracker.errors import TrackerLogCorrupt
from spark_ext.tracker.reports import Report, ReportKey
from spark_ext.tracker.substreams import Substream

__all__ = [
    "EndEvent",
    "TrackerFigures",
    "TrackerState",
    "apply_step",
    "declare_step",
    "replay_record",
]

log = logging.getLogger(__name__)


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
    """The agent's state size (docs/design.md invariant 4); ``in_flight``: elements sent and not
    finished, ``late_reports``: reports that touched an ended substream."""

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
    """Reports in, end events out; ``sources``: namespace -> the partitions that close it (none:
    only explicit closes)."""

    sources: dict[str, tuple[str, ...]] = field(default_factory=dict)
    high_water: dict[tuple[str, str, int], int] = field(default_factory=dict)
    xors: dict[str, int] = field(default_factory=dict)
    counts: dict[str, int] = field(default_factory=dict)
    ends: dict[str, int] = field(default_factory=dict)
    closed: set[str] = field(default_factory=set)
    progress: dict[str, int] = field(default_factory=dict)
    #: Namespace -> (end_ms, id) of its newest ended substream: all at or below it has ended.
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
        """End, in (end time, id) order per namespace, every open substream that is closed and
        balanced; number the events."""
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

    def frontier(self, namespace: str) -> tuple[dict[str, int], int | None]:
        """The source partitions' progress (a copy) and the end of ``namespace``'s oldest open
        substream (None: none open)."""
        prefix = namespace + "/"
        ends = [e for s, e in self.ends.items() if s.startswith(prefix)]
        return dict(self.progress), (min(ends) if ends else None)

    def to_dict(self) -> dict[str, Any]:
        """The state as a JSON value (a snapshot's body)."""
        d = {f.name: getattr(self, f.name) for f in fields(self)}
        d["high_water"] = [[*stream, b] for stream, b in self.high_water.items()]
        d["closed"] = sorted(self.closed)
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> TrackerState:
        """The inverse of :meth:`to_dict` (JSON keeps the numbers' types; tuples come as lists)."""
        return cls(
            **{k: d[k] for k in ("xors", "counts", "ends", "progress", "ended_counts")},
            sources={ns: tuple(p) for ns, p in d["sources"].items()},
            high_water={(q, st, p): b for q, st, p, b in d["high_water"]},
            closed=set(d["closed"]),
            released={ns: (r[0], r[1]) for ns, r in d["released"].items()},
            seq=d["seq"],
            late_reports=d["late_reports"],
        )

    def figures(self) -> TrackerFigures:
        """The state-size figures (no copy of the state)."""
        return TrackerFigures(
            open_substreams=len(self.ends),
            in_flight=sum(self.counts.get(s, 0) for s in self.ends),
            ended=sum(self.ended_counts.values()),
            late_reports=self.late_reports,
            last_seq=self.seq,
        )


def declare_step(
    state: TrackerState, namespace: str, sources: Iterable[str]
) -> tuple[dict[str, Any], list[EndEvent]] | None:
    """Declare ``namespace`` in ``state``: its log record, or None if so declared already."""
    srcs = tuple(sorted(sources))
    if state.sources.get(namespace) == srcs:
        return None
    state.declare(namespace, srcs)
    return {"t": "declare", "ns": namespace, "sources": list(srcs)}, []


def apply_step(
    state: TrackerState, reports: Sequence[Report]
) -> tuple[dict[str, Any], list[EndEvent]] | None:
    """Fold ``reports`` into ``state`` and settle it: the log record (the accepted reports and
    the end events they caused) and the end events, or None if every report was applied."""
    accepted = state.accept(reports)
    if not accepted:
        return None
    ends = state.settle()
    record = {
        "t": "apply",
        "reports": [r.to_dict() for r in accepted],
        "ends": [e.to_list() for e in ends],
    }
    return record, ends


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
