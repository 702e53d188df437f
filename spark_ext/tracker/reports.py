"""XOR reports: what one task of one stage saw in one micro-batch, pre-aggregated per
substream and applied once by the agent (docs/design.md, "Tracker")."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, fields
from typing import Any

import numpy as np
import numpy.typing as npt
import pandas as pd

from spark_ext.tracker.errors import ReportConflict

__all__ = ["Report", "ReportKey", "TaskReport", "batch_reports"]


@dataclass(frozen=True, order=True)
class ReportKey:
    """Identity of a report; the agent applies each key at most once."""

    query: str
    batch: int
    stage: str
    partition: int

    @property
    def stream(self) -> tuple[str, str, int]:
        """Who sends it, batch aside: one report stream per (query, stage, partition)."""
        return (self.query, self.stage, self.partition)


@dataclass
class TaskReport:
    """What one task of one stage reported in one batch, pre-aggregated on the executor as it
    goes: per substream the XOR of its labels, sent minus finished elements and its end; per
    ``topic:partition`` the time it is closed through; the substreams its producer closed. The
    driver adds the batch id."""

    stage: str
    partition: int
    xors: dict[str, int] = field(default_factory=dict)
    counts: dict[str, int] = field(default_factory=dict)
    ends: dict[str, int] = field(default_factory=dict)
    progress: dict[str, int] = field(default_factory=dict)
    closes: set[str] = field(default_factory=set)

    def is_empty(self) -> bool:
        return not (self.xors or self.counts or self.progress or self.closes)

    def add_labels(
        self,
        substreams: npt.ArrayLike,
        labels: npt.ArrayLike,
        sent: bool,
        ends: npt.ArrayLike | None = None,
    ) -> None:
        """Fold ``labels`` into their substreams (vectorised); ``sent`` counts +1 per element,
        else -1."""
        subs = np.asarray(substreams, dtype=object)
        if len(subs) == 0:
            return
        codes, uniques = pd.factorize(subs, sort=True)
        labs = np.asarray(labels, dtype=np.int64)
        order = np.argsort(codes, kind="stable")
        sorted_codes = codes[order]
        starts = np.flatnonzero(np.r_[True, sorted_codes[1:] != sorted_codes[:-1]])
        xors = np.bitwise_xor.reduceat(labs[order], starts)
        counts = np.diff(np.r_[starts, len(order)])
        first_ends = None
        if ends is not None:
            first_ends = np.asarray(ends, dtype=np.int64)[order][starts]
        sign = 1 if sent else -1
        for i, code in enumerate(sorted_codes[starts]):
            sid = str(uniques[code])
            self.xors[sid] = self.xors.get(sid, 0) ^ int(xors[i])
            self.counts[sid] = self.counts.get(sid, 0) + sign * int(counts[i])
            if first_ends is not None:
                _merge_ends(self.ends, {sid: int(first_ends[i])})

    def add_progress(self, source_partition: str, closed_through_ms: int) -> None:
        """Source partition ``source_partition`` will send nothing older than this any more."""
        p = self.progress
        p[source_partition] = max(p.get(source_partition, closed_through_ms), closed_through_ms)

    def add_substream(self, substream_id: str, end_ms: int) -> None:
        """Make ``substream_id`` known to the agent without elements (XOR 0), so it can end
        (a per-shard operator's bucket: docs/design.md, "Tracker")."""
        self.xors[substream_id] = self.xors.get(substream_id, 0)
        _merge_ends(self.ends, {substream_id: end_ms})

    def add_close(self, substream_id: str, end_ms: int) -> None:
        """The producer of ``substream_id`` closed it (it will send no more of it)."""
        self.closes.add(substream_id)
        _merge_ends(self.ends, {substream_id: end_ms})

    def merge(self, other: TaskReport) -> TaskReport:
        """The report of both (same stage and partition): XORs fold, progress takes the max."""
        if (self.stage, self.partition) != (other.stage, other.partition):
            raise ReportConflict(
                f"cannot merge reports of {(self.stage, self.partition)} and "
                f"{(other.stage, other.partition)}"
            )
        out = TaskReport(self.stage, self.partition)
        for src in (self, other):
            for s, x in src.xors.items():
                out.xors[s] = out.xors.get(s, 0) ^ x
            for s, c in src.counts.items():
                out.counts[s] = out.counts.get(s, 0) + c
            _merge_ends(out.ends, src.ends)
            for p, t in src.progress.items():
                out.progress[p] = max(out.progress.get(p, t), t)
            out.closes |= src.closes
        return out

    def to_dict(self) -> dict[str, Any]:
        return {
            **{f.name: getattr(self, f.name) for f in fields(self)},
            "closes": sorted(self.closes),
        }

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True, separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str) -> TaskReport:
        return cls.from_dict(json.loads(text))

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> TaskReport:
        """The inverse of :meth:`to_dict` (JSON keeps the numbers' types)."""
        return cls(**{**d, "closes": set(d.get("closes", ()))})


@dataclass(frozen=True)
class Report:
    """A task report with its full key, as the agent receives it."""

    key: ReportKey
    body: TaskReport

    def to_dict(self) -> dict[str, Any]:
        return {
            "key": [self.key.query, self.key.batch, self.key.stage, self.key.partition],
            "body": self.body.to_dict(),
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Report:
        q, b, s, p = d["key"]
        return cls(ReportKey(str(q), int(b), str(s), int(p)), TaskReport.from_dict(d["body"]))


def _merge_ends(into: dict[str, int], ends: Mapping[str, int]) -> None:
    for s, e in ends.items():
        if into.setdefault(s, e) != e:
            raise ReportConflict(f"substream {s} reported with ends {into[s]} and {e}")


def batch_reports(query: str, batch_id: int, reports: Iterable[TaskReport]) -> list[Report]:
    """Merge the task reports of one batch by (stage, partition) and key them, sorted by key
    (one report per task, however many group calls sent pieces)."""
    merged: dict[tuple[str, int], TaskReport] = {}
    for r in reports:
        k = (r.stage, r.partition)
        merged[k] = merged[k].merge(r) if k in merged else r
    return [
        Report(ReportKey(query, batch_id, stage, part), body)
        for (stage, part), body in sorted(merged.items())
        if not body.is_empty()
    ]
