"""Start-up checks of a tracked query: its agent, checkpoint and topic agree, else a typed error
(docs/design.md, "Tracked queries": start-up checks)."""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from typing import Any

from spark_ext import storage
from spark_ext.errors import ConfigError
from spark_ext.storage import Location, StorageSettings
from spark_ext.tracker.agent import TrackerState
from spark_ext.tracker.errors import (
    AgentBehindCheckpoint,
    CheckpointBehindAgent,
    CheckpointLayoutMismatch,
    PartitionSetMismatch,
)

__all__ = [
    "LAYOUT_FILE",
    "check_agent_and_checkpoint",
    "check_layout",
    "check_partitions",
    "read_end_seq",
]

log = logging.getLogger(__name__)


def _location(checkpoint: str) -> Location | None:
    """The checkpoint as a storage location; ``None`` for a scheme the storage layer does not
    read (then these checks are skipped, as Spark alone reads it)."""
    try:
        return Location.parse(checkpoint)
    except ConfigError:
        log.warning("checkpoint %s: start-up checks skipped (scheme not supported)", checkpoint)
        return None


def _numbered(loc: Location, folder: str, settings: StorageSettings | None) -> list[int]:
    """The batch ids of the checkpoint's ``offsets`` or ``commits`` log, sorted."""
    names = storage.list_prefix(loc.join(folder), settings)
    return sorted(int(n) for n in names if n.isdigit())


def _offset_entries(
    checkpoint: str, newest: bool, settings: StorageSettings | None
) -> list[dict[str, Any]]:
    """The JSON objects of the checkpoint's newest (or first) offset log entry; [] for none."""
    loc = _location(checkpoint)
    batches = _numbered(loc, "offsets", settings) if loc else []
    if loc is None or not batches:
        return []
    out = []
    entry = loc.join("offsets", str(batches[-1 if newest else 0]))
    for line in storage.read_bytes(entry, settings).decode().splitlines():
        try:
            value = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(value, dict):
            out.append(value)
    return out


def checkpoint_shuffle_partitions(
    checkpoint: str, settings: StorageSettings | None = None
) -> int | None:
    """The shuffle partition count Spark keeps for the query (first offset log entry); None for
    a new or unreadable checkpoint."""
    for value in _offset_entries(checkpoint, False, settings):
        found = value.get("conf", {}).get("spark.sql.shuffle.partitions")
        if found is not None:
            return int(found)
    return None


def read_end_seq(checkpoint: str, settings: StorageSettings | None = None) -> int:
    """The newest end-event offset (``{"seq": n}``) in the checkpoint's offset log (0: none)."""
    entries = _offset_entries(checkpoint, True, settings)
    seqs = [int(v["seq"]) for v in entries if set(v) == {"seq"}]
    return max(seqs, default=0)


def check_agent_and_checkpoint(
    state: TrackerState, query: str, checkpoint: str, settings: StorageSettings | None = None
) -> None:
    """Raise if the agent and the checkpoint of ``query`` do not belong together."""
    # Spark logs a batch's offsets before it runs it, so the agent never applied a batch the
    # checkpoint has not planned: one it has is a replay, one it has not is a reset.
    loc = _location(checkpoint)
    planned = _numbered(loc, "offsets", settings) if loc else []
    applied = state.last_batch(query)
    if loc is not None and applied is not None and applied > (planned or [-1])[-1]:
        raise CheckpointBehindAgent(
            f"query {query!r}: the agent applied batch {applied}, the checkpoint {checkpoint} "
            f"planned {planned[-1] if planned else 'none'}: the checkpoint was reset with the "
            "agent kept; start under a new name, or reset both together"
        )
    seq = read_end_seq(checkpoint, settings)
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


def check_layout(
    checkpoint: str, layout: Mapping[str, object], settings: StorageSettings | None = None
) -> None:
    """Record ``layout`` in a checkpoint without offsets; one with offsets must hold the same
    record, else :class:`CheckpointLayoutMismatch` naming the first difference."""
    loc = _location(checkpoint)
    if loc is None:
        return
    want = {"layout_version": LAYOUT_VERSION, **layout}  # compared in this order
    record = loc.join(LAYOUT_FILE)
    if not _numbered(loc, "offsets", settings):
        text = json.dumps(want, sort_keys=True, indent=1) + "\n"
        storage.write_bytes(record, text.encode(), settings)
        return
    try:
        have = json.loads(storage.read_bytes(record, settings))
    except FileNotFoundError:
        raise CheckpointLayoutMismatch(
            f"the checkpoint {checkpoint} has batches but no {LAYOUT_FILE}: it was written by "
            f"a spark_ext version before layout {LAYOUT_VERSION}, or by a query that is not "
            "tracked; start from a new checkpoint and a new agent"
        ) from None
    except storage.StorageError:
        raise
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
