"""The operator stage of one shard: fold the batch's data rows into their groups, then release
in end order every open window ending at or below ``min(frontier)`` (docs/design.md, "Tracked
queries"). Pure: Spark state (``stages.OperatorProcessor``) or dicts (the testers)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

import pandas as pd

from spark_ext.operators.base import Group, SubstreamOperator
from spark_ext.streaming.envelope import (
    ALL_SUBSTREAMS,
    KIND_DATA,
    KIND_END,
    KIND_LATE,
    KIND_PROGRESS,
    KIND_REPORT,
    KIND_RESULT,
    conform,
    end_rows,
)
from spark_ext.streaming.gate import NO_FRONTIER, GateConfig
from spark_ext.streaming.runner import GroupStore, late_output, run_stored
from spark_ext.tracker.substreams import Substream, Windowing

__all__ = [
    "DictStore",
    "ShardConfig",
    "ShardStore",
    "released_frontier",
    "run_shard",
    "stage_configs",
]


class ShardStore(GroupStore, Protocol):
    """A shard's state: group states (JSON), partition frontiers, the released frontier."""

    def group_ids(self) -> list[str]: ...

    def frontiers(self) -> dict[str, int]: ...

    def put_frontier(self, source: str, frontier: int) -> None: ...

    def released(self) -> int: ...

    def put_released(self, through: int) -> None: ...


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


@dataclass(frozen=True)
class ShardConfig:
    """What a shard needs, fixed when the query is planned (``sources`` empty: windows end by
    the agent's end events only; ``dedup``: rows are forwarded by an upstream query)."""

    operator: SubstreamOperator
    windowing: Windowing
    sources: tuple[str, ...]
    forward_namespace: str | None
    dedup: bool
    columns: tuple[str, ...]


def stage_configs(
    operator: SubstreamOperator,
    windowing: Windowing,
    closing: Any,
    shards: int,
    upstream: bool,
    forward_namespace: str | None,
    columns: tuple[str, ...],
) -> tuple[GateConfig, ShardConfig]:
    """The gate's and the shards' configuration of one tracked query (``closing``: a
    :class:`~spark_ext.streaming.query.Closing`)."""
    gate = GateConfig(
        windowing,
        operator.per_substream,
        shards,
        closing.disorder_ms,
        upstream,
        tuple(operator.input_columns),
        frozenset(closing.sources),
    )
    sources = tuple(closing.sources)
    return gate, ShardConfig(operator, windowing, sources, forward_namespace, upstream, columns)


def released_frontier(frontiers: dict[str, int], sources: tuple[str, ...]) -> int:
    """``min`` of the declared partitions' frontiers (:data:`NO_FRONTIER` if one has none)."""
    if not sources:
        return NO_FRONTIER
    return min(frontiers.get(s, NO_FRONTIER) for s in sources)


def run_shard(
    cfg: ShardConfig, shard: int, rows: pd.DataFrame, store: ShardStore, task_partition: int
) -> list[pd.DataFrame]:
    """One shard's call in one micro-batch; returns output frames."""
    columns = list(cfg.columns)
    inputs = list(cfg.operator.input_columns)
    out: list[pd.DataFrame] = []
    kind = rows["kind"]
    reports = rows[kind == KIND_REPORT]
    if len(reports):
        frame = pd.DataFrame({"kind": KIND_REPORT, "report": reports["report"].to_numpy()})
        out.append(conform(frame, columns))
    late = rows[kind == KIND_LATE]
    if len(late):
        out.append(late_output(late.reset_index(drop=True), inputs, columns))
    progress = rows[kind == KIND_PROGRESS]
    if len(progress) and cfg.sources:
        known = store.frontiers()
        declared = set(cfg.sources)
        for source, part in progress.groupby("tracked", sort=True):
            top = int(part["end_ms"].max())
            if str(source) in declared and top > known.get(str(source), NO_FRONTIER):
                store.put_frontier(str(source), top)
    work = rows[kind.isin([KIND_DATA, KIND_END])]
    for gid, part in work.groupby("substream", sort=True):
        out += _run(cfg, str(gid), shard, part.reset_index(drop=True), store, task_partition)
    frontier = released_frontier(store.frontiers(), cfg.sources)
    if frontier > store.released():
        out += _release(cfg, shard, frontier, store, task_partition)
        store.put_released(frontier)
    return out


def _release(
    cfg: ShardConfig, shard: int, frontier: int, store: ShardStore, task_partition: int
) -> list[pd.DataFrame]:
    """Flush every open window ending at or before ``frontier``, in end order."""
    out: list[pd.DataFrame] = []
    if cfg.operator.per_substream:
        due = sorted(
            (sub.end_ms, sub.id)
            for sub in (Substream.parse(g) for g in store.group_ids() if g != ALL_SUBSTREAMS)
            if sub.end_ms <= frontier
        )
        for _, gid in due:
            sub = Substream.parse(gid)
            ends = end_rows(gid, sub.start_ms, sub.end_ms, sub.end_ms)
            out += _run(cfg, gid, shard, ends, store, task_partition)
        return out
    bucket = cfg.windowing.closed_before(frontier)
    before = store.released()
    done = cfg.windowing.closed_before(before) if before > NO_FRONTIER else None
    if bucket is not None and (done is None or bucket.end_ms > done.end_ms):
        ends = end_rows(bucket.id, bucket.start_ms, bucket.end_ms, bucket.end_ms)
        out += _run(cfg, ALL_SUBSTREAMS, shard, ends, store, task_partition)
    return out


def _run(
    cfg: ShardConfig,
    gid: str,
    shard: int,
    rows: pd.DataFrame,
    store: ShardStore,
    task_partition: int,
) -> list[pd.DataFrame]:
    """One group's :func:`~spark_ext.streaming.runner.run_stored`, as output frames."""
    columns = list(cfg.columns)
    group = Group(gid, shard)
    res = run_stored(
        cfg.operator, store, group, rows, task_partition, cfg.forward_namespace, cfg.dedup
    )
    out: list[pd.DataFrame] = []
    if res.results is not None and len(res.results):
        out.append(conform(res.results.assign(kind=KIND_RESULT, report=None), columns))
    if res.late is not None and len(res.late):
        out.append(late_output(res.late, list(cfg.operator.input_columns), columns))
    if not res.report.is_empty():
        frame = pd.DataFrame({"kind": [KIND_REPORT], "report": [res.report.to_json()]})
        out.append(conform(frame, columns))
    return out
