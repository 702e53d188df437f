"""The operator stage of one shard: fold the batch's data rows into their groups, then release
in end order every open window ending at or below ``min(frontier)`` (docs/design.md, "Tracked
queries"). Pure: Spark state (``stages.OperatorProcessor``) or dicts (the testers)."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from spark_ext.operators.base import Group
from spark_ext.streaming.envelope import (
    ALL_SUBSTREAMS,
    KIND_DATA,
    KIND_END,
    KIND_LATE,
    KIND_PROGRESS,
    KIND_REPORT,
    KIND_RESULT,
    StageConfig,
    conform,
    end_rows,
)
from spark_ext.streaming.gate import NO_FRONTIER
from spark_ext.streaming.runner import GroupOutput, ShardStore, late_output, run_stored
from spark_ext.tracker.reports import TaskReport
from spark_ext.tracker.substreams import Substream

__all__ = ["DictStore", "run_shard"]


@dataclass
class DictStore:
    """:class:`~spark_ext.streaming.runner.ShardStore` in memory (the testers)."""

    groups: dict[str, str] = field(default_factory=dict)
    progress: dict[str, int] = field(default_factory=dict)
    through: int = NO_FRONTIER

    def group(self, gid: str) -> str | None:
        return self.groups.get(gid)

    def put_group(self, gid: str, blob: str) -> None:
        self.groups[gid] = blob

    def drop_group(self, gid: str) -> None:
        self.groups.pop(gid, None)

    def group_ids(self) -> list[str]:
        return list(self.groups)

    def frontiers(self) -> dict[str, int]:
        return dict(self.progress)

    def put_frontier(self, source: str, frontier: int) -> None:
        self.progress[source] = frontier

    def released(self) -> int:
        return self.through

    def put_released(self, through: int) -> None:
        self.through = through


@dataclass
class _Outputs:
    """One shard call's output, gathered over its groups and built into frames once."""

    results: list[pd.DataFrame] = field(default_factory=list)
    late: list[pd.DataFrame] = field(default_factory=list)
    report: TaskReport | None = None

    def add(self, res: GroupOutput) -> None:
        if res.results is not None and len(res.results):
            self.results.append(res.results)
        if res.late is not None and len(res.late):
            self.late.append(res.late)
        if not res.report.is_empty():
            self.report = res.report if self.report is None else self.report.merge(res.report)

    def frames(self, cfg: StageConfig) -> list[pd.DataFrame]:
        columns = cfg.columns
        out: list[pd.DataFrame] = []
        if self.results:
            res = (
                pd.concat(self.results, ignore_index=True)
                if len(self.results) > 1
                else self.results[0]
            )
            out.append(conform(res.assign(kind=KIND_RESULT), columns))
        if self.late:
            late = pd.concat(self.late, ignore_index=True)
            out.append(late_output(late, cfg))
        if self.report is not None:
            frame = pd.DataFrame({"kind": [KIND_REPORT], "report": [self.report.to_json()]})
            out.append(conform(frame, columns))
        return out


def run_shard(
    cfg: StageConfig, shard: int, rows: pd.DataFrame, store: ShardStore, task_partition: int
) -> list[pd.DataFrame]:
    """One shard's call in one micro-batch; returns output frames (results, late rows, one
    report merged over the shard's groups)."""
    out: list[pd.DataFrame] = []
    kind = rows["kind"].to_numpy()
    reports = rows[kind == KIND_REPORT]
    if len(reports):
        frame = pd.DataFrame({"kind": KIND_REPORT, "report": reports["report"].to_numpy()})
        out.append(conform(frame, cfg.columns))
    gathered = _Outputs()
    if (kind == KIND_LATE).any():  # the gate's, before the operator's
        gathered.late.append(rows[kind == KIND_LATE].reset_index(drop=True))
    progress = rows[kind == KIND_PROGRESS]
    if len(progress) and cfg.sources:
        known = store.frontiers()
        for source, part in progress.groupby("tracked", sort=True):
            top = int(part["end_ms"].max())
            if str(source) in cfg.sources and top > known.get(str(source), NO_FRONTIER):
                store.put_frontier(str(source), top)
    work = rows[(kind == KIND_DATA) | (kind == KIND_END)]
    if len(work):
        # one sort into (group, total order) and one slice per group (docs/design.md, "Operators")
        work = work.sort_values(
            ["substream", "event_time_ms", "label"], kind="mergesort", na_position="last"
        ).reset_index(drop=True)
        gids = work["substream"].to_numpy()
        bounds = np.flatnonzero(np.r_[True, gids[1:] != gids[:-1], True])
        for a, b in zip(bounds[:-1].tolist(), bounds[1:].tolist(), strict=True):
            group = Group(str(gids[a]), shard)
            gathered.add(run_stored(cfg, store, group, work.iloc[a:b], task_partition))
    known = store.frontiers()
    frontier = min((known.get(s, NO_FRONTIER) for s in cfg.sources), default=NO_FRONTIER)
    if frontier > store.released():
        _release(cfg, shard, frontier, store, task_partition, gathered)
        store.put_released(frontier)
    return out + gathered.frames(cfg)


def _release(
    cfg: StageConfig,
    shard: int,
    frontier: int,
    store: ShardStore,
    task_partition: int,
    into: _Outputs,
) -> None:
    """Flush every open window ending at or before ``frontier``, in end order."""
    if cfg.operator.per_substream:
        due = sorted(
            (sub.end_ms, sub.id)
            for sub in (Substream.parse(g) for g in store.group_ids() if g != ALL_SUBSTREAMS)
            if sub.end_ms <= frontier
        )
        for _, gid in due:
            sub = Substream.parse(gid)
            ends = end_rows(gid, sub.start_ms, sub.end_ms, sub.end_ms)
            into.add(run_stored(cfg, store, Group(gid, shard), ends, task_partition))
        return
    bucket = cfg.windowing.closed_before(frontier)
    before = store.released()
    done = cfg.windowing.closed_before(before) if before > NO_FRONTIER else None
    if bucket is not None and (done is None or bucket.end_ms > done.end_ms):
        ends = end_rows(bucket.id, bucket.start_ms, bucket.end_ms, bucket.end_ms)
        into.add(run_stored(cfg, store, Group(ALL_SUBSTREAMS, shard), ends, task_partition))
