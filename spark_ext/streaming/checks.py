"""Start-up checks of a tracked query: its agent, its checkpoint (local only) and its topic
agree, else a typed error (docs/design.md, "Tracked queries": start-up checks)."""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from spark_ext.tracker.agent import TrackerState
from spark_ext.tracker.errors import (
    AgentBehindCheckpoint,
    CheckpointBehindAgent,
    CheckpointLayoutMismatch,
    PartitionSetMismatch,
)

__all__ = [
    "LAYOUT_FILE",
    "LAYOUT_VERSION",
    "check_agent_and_checkpoint",
    "check_layout",
    "check_partitions",
    "checkpoint_shuffle_partitions",
    "read_end_seq",
]

log = logging.getLogger(__name__)


def _local(checkpoint: str) -> Path | None:
    if checkpoint.startswith("file:"):
        checkpoint = checkpoint[len("file:") :].lstrip("/")
        checkpoint = "/" + checkpoint
    elif "://" in checkpoint:
        return None
    return Path(checkpoint)


def _numbered(folder: Path) -> list[int]:
    if not folder.is_dir():
        return []
    return sorted(int(p.name) for p in folder.iterdir() if p.name.isdigit())


def _offset_entries(checkpoint: str, newest: bool) -> list[dict[str, Any]]:
    """The JSON objects of the checkpoint's newest (or first) offset log entry; [] for none."""
    path = _local(checkpoint)
    batches = _numbered(path / "offsets") if path else []
    if path is None or not batches:
        return []
    out = []
    for line in (path / "offsets" / str(batches[-1 if newest else 0])).read_text().splitlines():
        try:
            value = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(value, dict):
            out.append(value)
    return out


def checkpoint_shuffle_partitions(checkpoint: str) -> int | None:
    """The shuffle partition count Spark keeps for the query (first offset log entry); None for
    a new, remote or unreadable checkpoint."""
    for value in _offset_entries(checkpoint, newest=False):
        found = value.get("conf", {}).get("spark.sql.shuffle.partitions")
        if found is not None:
            return int(found)
    return None


def read_end_seq(checkpoint: str) -> int:
    """The newest end-event offset (``{"seq": n}``) in the checkpoint's offset log (0: none)."""
    seqs = [int(v["seq"]) for v in _offset_entries(checkpoint, newest=True) if set(v) == {"seq"}]
    return max(seqs, default=0)


def check_agent_and_checkpoint(state: TrackerState, query: str, checkpoint: str) -> None:
    """Raise if the agent and the checkpoint of ``query`` do not belong together."""
    # Spark logs a batch's offsets before it runs it, so the agent never applied a batch the
    # checkpoint has not planned: one it has is a replay, one it has not is a reset.
    path = _local(checkpoint)
    planned = _numbered(path / "offsets") if path else []
    applied = state.last_batch(query)
    if path is not None and applied is not None and applied > (planned or [-1])[-1]:
        raise CheckpointBehindAgent(
            f"query {query!r}: the agent applied batch {applied}, the checkpoint {checkpoint} "
            f"planned {planned[-1] if planned else 'none'}: the checkpoint was reset with the "
            "agent kept; start under a new name, or reset both together"
        )
    seq = read_end_seq(checkpoint)
    if seq > state.seq:
        raise AgentBehindCheckpoint(
            f"query {query!r}: the checkpoint {checkpoint} read end events up to {seq}, the "
            f"agent's newest is {state.seq}: the agent's log was lost; restore it, or reset the "
            "checkpoint together with the agent"
        )


#: Version of the tracked query's state layout; bumped when older state becomes unreadable.
LAYOUT_VERSION = 1
#: The layout record in a tracked query's checkpoint folder.
LAYOUT_FILE = "spark_ext_tracked.json"


def check_layout(checkpoint: str, layout: Mapping[str, object]) -> None:
    """Record ``layout`` in a checkpoint without offsets; one with offsets must hold the same
    record, else :class:`CheckpointLayoutMismatch` naming the first difference."""
    path = _local(checkpoint)
    if path is None:
        return
    want = {"layout_version": LAYOUT_VERSION, **layout}  # compared in this order
    record = path / LAYOUT_FILE
    if not _numbered(path / "offsets"):
        path.mkdir(parents=True, exist_ok=True)
        tmp = path / f".{LAYOUT_FILE}.tmp"
        tmp.write_text(json.dumps(want, sort_keys=True, indent=1) + "\n")
        tmp.replace(record)
        return
    if not record.is_file():
        raise CheckpointLayoutMismatch(
            f"the checkpoint {checkpoint} has batches but no {LAYOUT_FILE}: it was written by "
            f"a spark_ext version before layout {LAYOUT_VERSION}, or by a query that is not "
            "tracked; start from a new checkpoint and a new agent"
        )
    try:
        have = json.loads(record.read_text())
    except (OSError, json.JSONDecodeError) as e:
        raise CheckpointLayoutMismatch(f"{record} cannot be read: {e}") from e
    for k in want:
        if have.get(k) != want[k]:
            raise CheckpointLayoutMismatch(
                f"the checkpoint {checkpoint} holds state for {k}={have.get(k)!r}, this query "
                f"has {k}={want[k]!r}: resume with {k}={have.get(k)!r}, or start from a new "
                "checkpoint and a new agent"
            )


def check_partitions(sources: tuple[str, ...], partition_counts: Mapping[str, int]) -> None:
    """Raise if the declared ``topic:partition`` sources are not each topic's partitions."""
    declared: dict[str, set[int]] = {}
    for s in sources:
        topic, _, part = s.rpartition(":")
        declared.setdefault(topic, set()).add(int(part))
    for topic, parts in sorted(declared.items()):
        n = partition_counts.get(topic)
        if n is None:
            continue
        if parts != set(range(n)):
            raise PartitionSetMismatch(
                "Closing.sources",
                f"topic {topic!r} has partitions 0..{n - 1}, declared {sorted(parts)}",
            )
