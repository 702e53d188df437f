"""One tracked batch in one process, pure: the driver path's and the testers' code
(docs/design.md, "Tracked queries": the two paths)."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field

import numpy as np
import pandas as pd

from spark_ext.operators.base import SubstreamOperator
from spark_ext.streaming.envelope import (
    ALL_SUBSTREAMS,
    GATE_STAGE,
    KIND_LATE,
    KIND_REPORT,
    KIND_RESULT,
    LATE_COLUMNS,
    LATE_SOURCE,
    StageConfig,
    end_rows,
)
from spark_ext.streaming.gate import NO_FRONTIER, gate_partition
from spark_ext.streaming.shard import DictStore, GroupState, run_shard
from spark_ext.tracker.agent import EndEvent
from spark_ext.tracker.reports import TaskReport

__all__ = ["BatchOutput", "BatchState", "run_batch", "source_frame"]


@dataclass
class BatchState:
    """What a tracked query keeps between batches on the driver path: each source partition's
    gate frontier, each shard's store."""

    frontiers: dict[str, int] = field(default_factory=dict)
    stores: dict[int, DictStore] = field(default_factory=dict)
    _sizes: dict[tuple[int, str], tuple[str, int]] = field(default_factory=dict, repr=False)

    def to_json(self) -> bytes:
        body = {
            "frontiers": self.frontiers,
            "shards": {str(k): asdict(s) for k, s in sorted(self.stores.items())},
        }
        return json.dumps(body, sort_keys=True, separators=(",", ":")).encode()

    @classmethod
    def from_json(cls, data: bytes) -> BatchState:
        body = json.loads(data)
        stores = {int(k): DictStore(**s) for k, s in body["shards"].items()}
        return cls(body["frontiers"], stores)

    def open_keys(self, operator: SubstreamOperator) -> int:
        """Open (window, key) groups: :meth:`SubstreamOperator.open_keys` summed over the open
        groups (a group's count is recomputed only when its state changed)."""
        total = 0
        seen = set()
        for shard, store in self.stores.items():
            for gid, blob in store.groups.items():
                seen.add((shard, gid))
                cached = self._sizes.get((shard, gid))
                if cached is None or cached[0] is not blob:
                    n = operator.open_keys(GroupState.from_json(blob).op.get())
                    cached = self._sizes[(shard, gid)] = (blob, n)
                total += cached[1]
        for gone in set(self._sizes) - seen:
            del self._sizes[gone]
        return total


@dataclass
class BatchOutput:
    """One batch's result rows (the operator's columns), late rows (:data:`LATE_COLUMNS`) and
    task reports."""

    results: pd.DataFrame
    late: pd.DataFrame
    reports: list[TaskReport]


def run_batch(
    cfg: StageConfig, state: BatchState, src: pd.DataFrame, ends: list[EndEvent]
) -> BatchOutput:
    """Gate ``src`` (the columns of ``TrackedQuery._input``), one source partition at a time;
    fold ``ends`` (the agent's end events of an upstream-closed query); run each shard over its
    rows, in ``state`` (updated)."""
    reports: list[TaskReport] = []
    envelope: list[pd.DataFrame] = []
    if len(src):
        for (topic, part), g in src.groupby(["_topic", "_partition"], sort=True):
            report = TaskReport(GATE_STAGE, int(part))
            source = f"{topic}:{int(part)}"
            frames, new = gate_partition(g, state.frontiers.get(source, NO_FRONTIER), cfg, report)
            if new > NO_FRONTIER:
                state.frontiers[source] = new
            envelope += frames
            reports.append(report)
    for e in ends if not cfg.sources else []:  # an upstream query closes the substreams
        ctrl = end_rows(e.substream, e.start_ms, e.end_ms, e.seq, cfg.shards)
        group = e.substream if cfg.operator.per_substream else ALL_SUBSTREAMS
        envelope.append(ctrl.assign(substream=group, shard=range(cfg.shards)))
    results: list[pd.DataFrame] = []
    late: list[pd.DataFrame] = []
    # a label on every row (0 where none), as in the Spark plan
    envelope = [f if "label" in f else f.assign(label=np.int64(0)) for f in envelope if len(f)]
    if envelope:
        env = pd.concat(envelope, ignore_index=True)
        for shard, part in env.groupby("shard", sort=True):
            store = state.stores.setdefault(int(shard), DictStore())
            for frame in run_shard(cfg, int(shard), part.reset_index(drop=True), store, int(shard)):
                kinds = frame["kind"]
                results.append(frame[kinds == KIND_RESULT])
                late.append(frame[kinds == KIND_LATE])
                reports += [TaskReport.from_json(r) for r in frame["report"][kinds == KIND_REPORT]]
    result_columns = cfg.result_columns
    results = [r.loc[:, result_columns] for r in results if len(r)]
    late = [x for x in late if len(x)]
    res = (
        pd.concat(results, ignore_index=True)
        if results
        else pd.DataFrame({c: pd.Series([], dtype=object) for c in result_columns})
    )
    lat = (
        pd.concat(late, ignore_index=True)
        .loc[:, [LATE_SOURCE.get(c, c) for c in LATE_COLUMNS]]
        .set_axis(LATE_COLUMNS, axis=1)
        if late
        else pd.DataFrame(columns=LATE_COLUMNS)
    )
    return BatchOutput(res, lat, reports)


def source_frame(frame: pd.DataFrame, input_columns: tuple[str, ...]) -> pd.DataFrame:
    """Test rows (``partition``, ``offset``, ``key``, ``event_time_ms``; optional ``topic``,
    ``close``, ``side``, ``fwd_*``, input columns) as the columns of ``TrackedQuery._input``."""
    src = pd.DataFrame(
        {
            "_key": frame.get("key"),
            "_t": frame.get("event_time_ms"),
            "_topic": frame["topic"] if "topic" in frame else "src",
            "_partition": frame["partition"],
            "_offset": frame["offset"],
            "_close": frame["close"] if "close" in frame else None,
            "_side": frame["side"] if "side" in frame else "",
            "_fwd_substream": frame.get("fwd_substream"),
            "_fwd_label": frame.get("fwd_label"),
        }
    )
    for c in input_columns:
        src[c] = frame[c] if c in frame else None
    for c in ("_key", "_t", "_close", "_fwd_substream", "_fwd_label"):
        if src[c].isna().all():
            src[c] = pd.Series([None] * len(src), dtype=object)
    return src
