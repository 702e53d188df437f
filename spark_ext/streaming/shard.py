"""The operator stage of one shard, pure: run each group's rows through the operator, then release
every open window at or below ``min(frontier)`` (docs/design.md, "Tracked queries")."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np
import pandas as pd

from spark_ext.operators.base import Group, OperatorState
from spark_ext.streaming.envelope import (
    ALL_SUBSTREAMS,
    KIND_DATA,
    KIND_END,
    KIND_LATE,
    KIND_PROGRESS,
    KIND_REPORT,
    KIND_RESULT,
    LATE_GROUP,
    OPERATOR_STAGE,
    REASON_DUPLICATE,
    REASON_ENDED,
    StageConfig,
    conform,
    end_rows,
    raw_json,
)
from spark_ext.streaming.gate import NO_FRONTIER
from spark_ext.tracker.agent import EndEvent
from spark_ext.tracker.labels import labels_of
from spark_ext.tracker.reports import TaskReport
from spark_ext.tracker.substreams import Substream

__all__ = ["DictStore", "GroupState", "ShardStore", "run_shard"]


@dataclass
class GroupState:
    """The pipeline's state of one group: the operator's state plus dedup/tombstone fields."""

    op: OperatorState
    forwarded: int = 0
    seen: set[int] = field(default_factory=set)
    ended: int | None = None
    changed: bool = False

    @classmethod
    def from_json(cls, text: str | None) -> GroupState:
        if not text:
            return cls(OperatorState())
        d = json.loads(text)
        return cls(
            OperatorState(d.get("op")),
            int(d.get("fwd", 0)),
            {int(x) for x in d.get("seen", [])},
            d.get("ended"),
        )

    @property
    def removed(self) -> bool:
        """Nothing left to keep: the group's state can be dropped."""
        return not self.op.exists() and self.ended is None and not self.seen and not self.forwarded

    def to_json(self) -> str:
        d: dict[str, Any] = {"op": self.op.get()}
        if self.forwarded:
            d["fwd"] = self.forwarded
        if self.seen:
            d["seen"] = sorted(self.seen)
        if self.ended is not None:
            d["ended"] = self.ended
        return json.dumps(d, sort_keys=True, separators=(",", ":"))


def forward_labels(substream: str, keys: pd.Series, row_numbers: np.ndarray) -> np.ndarray:
    """Labels of forwarded result rows: derived from (substream, key, row), stable on replay."""
    coords = [f"{substream}|{k}" for k in keys]
    return labels_of(coords, np.zeros(len(coords), dtype=np.int64), row_numbers)


def _late(rows: pd.DataFrame, reason: str, cfg: StageConfig) -> pd.DataFrame:
    raw = raw_json(rows, "key", "event_time_ms", list(cfg.operator.input_columns))
    return rows.assign(kind=KIND_LATE, substream=LATE_GROUP, reason=reason, raw=raw)


def run_group(
    cfg: StageConfig, group: Group, state: GroupState, rows: pd.DataFrame, out: _Outputs
) -> None:
    """Run the operator over the rows of one group in one batch, into ``out``."""
    op, forward_namespace, dedup = cfg.operator, cfg.forward_namespace, cfg.upstream
    report, outs, lates = out.report, out.results, out.late

    def forward(produced: pd.DataFrame, start_ms: int, end_ms: int) -> pd.DataFrame:
        assert forward_namespace is not None
        fwd = Substream(forward_namespace, start_ms, end_ms).id
        produced = produced.reset_index(drop=True)
        numbers = np.arange(state.forwarded, state.forwarded + len(produced), dtype=np.int64)
        state.forwarded += len(produced)
        state.changed = True
        keys = produced["key"] if "key" in produced else pd.Series([""] * len(produced))
        labels = forward_labels(fwd, keys, numbers)
        report.add_labels([fwd] * len(produced), labels, sent=True, ends=[end_ms] * len(produced))
        return produced.assign(fwd_substream=fwd, fwd_label=labels)

    kind = rows["kind"].to_numpy()
    is_data = kind == KIND_DATA
    data = rows if is_data.all() else rows[is_data]
    if len(data):
        data = _in_order(data)
        if dedup and state.ended is not None:
            lates.append(_late(data, REASON_ENDED, cfg))
            data = data.iloc[0:0]
        elif dedup:
            labels = data["label"].astype(np.int64)
            dup = labels.duplicated().to_numpy() | labels.isin(state.seen).to_numpy()
            if dup.any():
                lates.append(_late(data[dup], REASON_DUPLICATE, cfg))
                data = data[~dup].reset_index(drop=True)
            state.seen |= {int(x) for x in data["label"]}
            state.changed = True
    if len(data):
        report.add_labels(data["tracked"], data["label"], sent=False)
        produced = op.process(group, state.op, data)
        if produced is not None and len(produced):
            if forward_namespace is not None:
                if not op.per_substream:
                    raise NotImplementedError(
                        "a per-shard operator emitting rows from process() cannot be forwarded"
                    )
                start, end = int(data["start_ms"].iloc[0]), int(data["end_ms"].iloc[0])
                produced = forward(produced, start, end)
            outs.append(produced)
    is_end = kind == KIND_END
    ends = rows if is_end.all() else rows[is_end]
    if len(ends) > 1:
        ends = ends.sort_values(["end_ms", "tracked"], kind="mergesort")
    for seq, tracked, start, end_ms in zip(
        ends["label"].tolist(),
        ends["tracked"].tolist(),
        ends["start_ms"].tolist(),
        ends["end_ms"].tolist(),
        strict=True,
    ):
        signal = EndEvent(int(seq), str(tracked), int(start), int(end_ms))
        produced = op.flush(group, state.op, signal)
        if forward_namespace is not None:
            fwd = Substream(forward_namespace, signal.start_ms, signal.end_ms).id
            report.add_close(fwd, signal.end_ms)
            if produced is not None and len(produced):
                produced = forward(produced, signal.start_ms, signal.end_ms)
        if produced is not None and len(produced):
            outs.append(produced)
        if op.per_substream:  # the window is over: keep only a tombstone (dedup) or nothing
            state.forwarded, state.seen, state.changed = 0, set(), True
            if dedup:
                state.ended = signal.seq


def _in_order(data: pd.DataFrame) -> pd.DataFrame:
    """``data`` in the total order ``(event_time_ms, label)``, sorted only if it is not."""
    t = data["event_time_ms"].to_numpy(dtype=np.int64)
    lab = data["label"].to_numpy(dtype=np.int64)
    if len(t) < 2 or bool(np.all((t[1:] > t[:-1]) | ((t[1:] == t[:-1]) & (lab[1:] >= lab[:-1])))):
        return data.reset_index(drop=True)
    return data.iloc[np.lexsort((lab, t))].reset_index(drop=True)


def late_output(late: pd.DataFrame, cfg: StageConfig) -> pd.DataFrame:
    """Envelope late rows -> the operator stage's output rows of kind ``late``."""
    frame = pd.DataFrame(
        {
            "kind": KIND_LATE,
            "window": late["tracked"].to_numpy(),
            "late_key": late["key"].to_numpy(),
            "late_time_ms": late["event_time_ms"].to_numpy(),
            "src_topic": late["src_topic"].to_numpy(),
            "src_partition": late["src_partition"].to_numpy(),
            "src_offset": late["src_offset"].to_numpy(),
            "reason": late["reason"].to_numpy(),
            "raw": late["raw"].to_numpy(),
        }
    )
    return conform(frame, cfg.columns)


class ShardStore(Protocol):
    """A shard's state: group states (JSON by group id), partition frontiers, the released
    frontier (``shard.DictStore`` in memory, ``stages`` on Spark's state)."""

    def group(self, gid: str) -> str | None: ...

    def put_group(self, gid: str, blob: str) -> None: ...

    def drop_group(self, gid: str) -> None: ...

    def group_ids(self) -> list[str]: ...

    def frontiers(self) -> dict[str, int]: ...

    def put_frontier(self, source: str, frontier: int) -> None: ...

    def released(self) -> int: ...

    def put_released(self, through: int) -> None: ...


def run_stored(
    cfg: StageConfig, store: ShardStore, group: Group, rows: pd.DataFrame, out: _Outputs
) -> None:
    """:func:`run_group` on the state ``store`` keeps for the group, written back (or dropped)."""
    state = GroupState.from_json(store.group(group.substream))
    run_group(cfg, group, state, rows, out)
    if state.changed or state.op.changed:
        if state.removed:
            store.drop_group(group.substream)
        else:
            store.put_group(group.substream, state.to_json())


@dataclass
class DictStore:
    """:class:`ShardStore` in memory (the testers)."""

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
    """One shard call's output, gathered over its groups (one report) and built into frames
    once."""

    report: TaskReport
    results: list[pd.DataFrame] = field(default_factory=list)
    late: list[pd.DataFrame] = field(default_factory=list)

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
        if not self.report.is_empty():
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
    gathered = _Outputs(TaskReport(OPERATOR_STAGE, task_partition))
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
            run_stored(cfg, store, group, work.iloc[a:b], gathered)
    known = store.frontiers()
    frontier = min((known.get(s, NO_FRONTIER) for s in cfg.sources), default=NO_FRONTIER)
    if frontier > store.released():
        _release(cfg, shard, frontier, store, gathered)
        store.put_released(frontier)
    return out + gathered.frames(cfg)


def _release(
    cfg: StageConfig, shard: int, frontier: int, store: ShardStore, into: _Outputs
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
            run_stored(cfg, store, Group(gid, shard), ends, into)
        return
    bucket = cfg.windowing.closed_before(frontier)
    before = store.released()
    done = cfg.windowing.closed_before(before) if before > NO_FRONTIER else None
    if bucket is not None and (done is None or bucket.end_ms > done.end_ms):
        ends = end_rows(bucket.id, bucket.start_ms, bucket.end_ms, bucket.end_ms)
        run_stored(cfg, store, Group(ALL_SUBSTREAMS, shard), ends, into)
