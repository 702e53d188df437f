"""The gate: per source partition, keep its frontier and let through only rows above it; the
others go to the late output with their reason (docs/design.md, "Tracked queries"). Pure."""

from __future__ import annotations

import numpy as np
import pandas as pd

from spark_ext.streaming.envelope import (
    ALL_SUBSTREAMS,
    KIND_DATA,
    KIND_LATE,
    KIND_PROGRESS,
    LATE_GROUP,
    PROGRESS_GROUP,
    REASON_BELOW_FRONTIER,
    REASON_NO_SUBSTREAM,
    REASON_NULL_KEY,
    REASON_NULL_TIME,
    REASON_UNDECLARED,
    StageConfig,
    raw_json,
)
from spark_ext.tracker.errors import ConfigError
from spark_ext.tracker.labels import key_hashes, labels_of
from spark_ext.tracker.reports import TaskReport
from spark_ext.tracker.substreams import Substream

__all__ = ["NO_FRONTIER", "gate_partition"]

#: "No frontier yet" (the partition has promised nothing).
NO_FRONTIER = -(2**63)


def substream_ids(namespace: str, starts: np.ndarray, ends: np.ndarray) -> pd.Series:
    """``namespace/start/end`` per membership, one string built per distinct window."""
    if len(starts) == 0:
        return pd.Series([], dtype=object)
    pairs, inverse = np.unique(np.stack([starts, ends]), axis=1, return_inverse=True)
    names = np.asarray(
        [f"{namespace}/{a}/{b}" for a, b in zip(pairs[0].tolist(), pairs[1].tolist(), strict=True)],
        dtype=object,
    )
    return pd.Series(names[inverse.reshape(-1)], dtype=object)


def late_rows(rows: pd.DataFrame, reasons: list[str], shard: int, cfg: StageConfig) -> pd.DataFrame:
    """Late rows in the envelope (kind ``late``, ``tracked``: the windows they missed) from gate
    input rows (``_key``, ``_t``, ...)."""
    n = len(rows)
    times = rows["_t"].astype("float64")
    substreams = cfg.windowing.substreams_of
    return pd.DataFrame(
        {
            "substream": [LATE_GROUP] * n,
            "shard": [shard] * n,
            "kind": [KIND_LATE] * n,
            "tracked": [
                None if np.isnan(t) else ",".join(s.id for s in substreams(int(t))) for t in times
            ],
            "key": [None if pd.isna(k) else str(k) for k in rows["_key"]],
            "event_time_ms": pd.array(
                [None if np.isnan(t) else int(t) for t in times], dtype="Int64"
            ),
            "src_topic": rows["_topic"].astype(str).tolist(),
            "src_partition": rows["_partition"].astype(np.int64).tolist(),
            "src_offset": rows["_offset"].astype(np.int64).tolist(),
            "reason": reasons,
            "raw": raw_json(rows, "_key", "_t", list(cfg.operator.input_columns)),
        }
    )


def progress_rows(source: str, frontier: int, shards: int) -> pd.DataFrame:
    """``source``'s frontier as one ``progress`` envelope row per operator shard."""
    return pd.DataFrame(
        {
            "substream": [PROGRESS_GROUP] * shards,
            "shard": np.arange(shards, dtype=np.int32),
            "kind": [KIND_PROGRESS] * shards,
            "tracked": [source] * shards,
            "end_ms": np.full(shards, frontier, dtype=np.int64),
        }
    )


def gate_partition(
    pdf: pd.DataFrame, frontier: int, cfg: StageConfig, report: TaskReport
) -> tuple[list[pd.DataFrame], int]:
    """Gate the rows of ONE source partition (``_key``, ``_t``, ``_topic``, ``_partition``,
    ``_offset``, ``_close``, ``_side``, ``_fwd_*``, input columns) in one batch, reporting to
    ``report``: the envelope frames (data, late, progress rows) and the new frontier."""
    if pdf.empty:
        return [], frontier
    pdf = pdf.sort_values("_offset", kind="mergesort").reset_index(drop=True)
    topic, part = str(pdf["_topic"].iloc[0]), int(pdf["_partition"].iloc[0])
    is_marker = pdf["_close"].notna().to_numpy()
    is_data = ~is_marker
    t_null = pdf["_t"].isna().to_numpy()
    key_null = pdf["_key"].isna().to_numpy()
    t = pdf["_t"].astype("float64").fillna(0).to_numpy().astype(np.int64)
    closes = pdf["_close"].astype("float64").fillna(0).to_numpy().astype(np.int64)

    # the frontier each row meets: the one before the batch, moved by every earlier row
    cand = np.full(len(pdf), NO_FRONTIER, dtype=np.int64)
    cand[is_marker] = closes[is_marker]
    valid = is_data & ~t_null & ~key_null
    if cfg.disorder_ms is not None:
        cand[valid] = t[valid] - cfg.disorder_ms
    running = np.maximum.accumulate(np.r_[np.int64(frontier), cand])
    before, new_frontier = running[:-1], int(running[-1])

    reasons = np.full(len(pdf), None, dtype=object)
    reasons[is_data & t_null] = REASON_NULL_TIME
    reasons[is_data & ~t_null & key_null] = REASON_NULL_KEY
    reasons[valid & (t < before)] = REASON_BELOW_FRONTIER
    if cfg.sources and f"{topic}:{part}" not in cfg.sources:
        reasons[is_data] = REASON_UNDECLARED
    if cfg.upstream:
        no_sub = valid & pdf["_fwd_substream"].isna().to_numpy()
        reasons[no_sub & (reasons == None)] = REASON_NO_SUBSTREAM  # noqa: E711
    keep = is_data & (reasons == None)  # noqa: E711
    late_mask = is_data & ~keep

    frames: list[pd.DataFrame] = []
    data = pdf[keep].reset_index(drop=True)
    if len(data):
        frames.append(_assign(data, cfg, report))
    if late_mask.any():
        late = pdf[late_mask].reset_index(drop=True)
        frames.append(late_rows(late, reasons[late_mask].tolist(), part % cfg.shards, cfg))
    if new_frontier > NO_FRONTIER:
        report.add_progress(f"{topic}:{part}", new_frontier)
        if f"{topic}:{part}" in cfg.sources:
            frames.append(progress_rows(f"{topic}:{part}", new_frontier, cfg.shards))
        if not cfg.operator.per_substream:
            bucket = cfg.windowing.closed_before(new_frontier)
            if bucket is not None:
                report.add_substream(bucket.id, bucket.end_ms)
    return frames, new_frontier


def _assign(data: pd.DataFrame, cfg: StageConfig, report: TaskReport) -> pd.DataFrame:
    """Data rows -> envelope rows (one per substream membership), reported as sent."""
    namespace = cfg.windowing.namespace
    times = data["_t"].astype("float64").to_numpy().astype(np.int64)
    if cfg.upstream:
        idx = np.arange(len(data), dtype=np.int64)
        subs = [Substream.parse(str(s)) for s in data["_fwd_substream"]]
        foreign = {s.namespace for s in subs} - {namespace}
        if foreign:
            raise ConfigError(
                "TrackedStream.upstream",
                f"rows forwarded into {sorted(foreign)}, this query tracks "
                f"{namespace!r}: forward_to() and the windowing must name one namespace",
            )
        starts = np.asarray([s.start_ms for s in subs], dtype=np.int64)
        ends = np.asarray([s.end_ms for s in subs], dtype=np.int64)
        labels = data["_fwd_label"].astype(np.int64).to_numpy()
    else:
        idx, starts, ends = cfg.windowing.assign(times)
        labels = labels_of(data["_topic"].to_numpy(), data["_partition"], data["_offset"])[idx]
    rows = data.iloc[idx].reset_index(drop=True)
    tracked = substream_ids(namespace, starts, ends)
    keys = rows["_key"].astype(str)
    codes, uniques = pd.factorize(keys)
    shard = (key_hashes(uniques) % np.uint64(cfg.shards)).astype(np.int32)[codes]
    out = pd.DataFrame(
        {
            "substream": tracked if cfg.operator.per_substream else ALL_SUBSTREAMS,
            "shard": shard,
            "kind": KIND_DATA,
            "tracked": tracked,
            "start_ms": starts,
            "end_ms": ends,
            "key": keys,
            "event_time_ms": times[idx],
            "label": labels,
            "side": rows["_side"],
            "report": None,
            "src_topic": rows["_topic"].astype(str),
            "src_partition": rows["_partition"].astype(np.int64),
            "src_offset": rows["_offset"].astype(np.int64),
            **{c: rows[c] for c in cfg.operator.input_columns},
        }
    )
    if not cfg.upstream:  # forwarded rows were reported as sent by the upstream query
        report.add_labels(tracked, labels, sent=True, ends=ends)
    return out
