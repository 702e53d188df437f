"""Start-up checks of a tracked query: its agent, its checkpoint and its topic agree.

Each mismatch is a typed error raised before the query starts (docs/design.md, invariant 3:
a bad configuration fails fast):

* :class:`~spark_ext.tracker.errors.CheckpointBehindAgent` -- the agent applied batches of
  this query beyond what the checkpoint committed (+1: a batch may have been applied and
  killed before Spark's commit): a reset checkpoint with the agent kept.
* :class:`~spark_ext.tracker.errors.AgentBehindCheckpoint` -- the checkpoint's offsets have
  read end events past the agent's newest: the agent's log was lost.
* :class:`~spark_ext.tracker.errors.PartitionSetMismatch` -- the declared partitions of a
  topic are not the topic's partitions (from its metadata).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from pathlib import Path

from spark_ext.tracker.agent import TrackerState
from spark_ext.tracker.errors import (
    AgentBehindCheckpoint,
    CheckpointBehindAgent,
    PartitionSetMismatch,
)

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


def last_committed_batch(checkpoint: str) -> int | None:
    """The newest batch id in ``<checkpoint>/commits`` (None: none, or not a local path)."""
    path = _local(checkpoint)
    batches = _numbered(path / "commits") if path else []
    return batches[-1] if batches else None


def read_end_seq(checkpoint: str) -> int:
    """The newest end-event offset (``{"seq": n}``) in the checkpoint's offset log (0: none)."""
    path = _local(checkpoint)
    batches = _numbered(path / "offsets") if path else []
    if not batches:
        return 0
    seq = 0
    for line in (path / "offsets" / str(batches[-1])).read_text().splitlines():  # type: ignore[operator]
        try:
            value = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(value, dict) and set(value) == {"seq"}:
            seq = max(seq, int(value["seq"]))
    return seq


def check_agent_and_checkpoint(state: TrackerState, query: str, checkpoint: str) -> None:
    """Raise if the agent and the checkpoint of ``query`` do not belong together."""
    committed = last_committed_batch(checkpoint)
    applied = state.last_batch(query)
    if applied is not None and applied > (committed if committed is not None else -1) + 1:
        raise CheckpointBehindAgent(
            f"query {query!r}: the agent applied batch {applied}, the checkpoint {checkpoint} "
            f"committed {committed}: the checkpoint was reset with the agent kept"
        )
    seq = read_end_seq(checkpoint)
    if seq > state.seq:
        raise AgentBehindCheckpoint(
            f"query {query!r}: the checkpoint {checkpoint} read end events up to {seq}, the "
            f"agent's newest is {state.seq}: the agent's log was lost"
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
