"""Who owns a sink id: the streaming query whose checkpoint writes it (issue #24, N11).

Idempotence is keyed by (sink id, batch id) (docs/design.md invariant 1), which holds only while
one query writes with a sink id. A second query (another input, its own checkpoint) reusing
the id starts at batch 0 again, and its batch 0 was taken for a replay of the first query's
batch 0 and skipped: data lost with exit code 0. So every sink records its owner next to the
batch marker and refuses a stranger before writing anything.

The owner is Spark's streaming query id (:class:`SinkOwner`). Spark keeps it in the
checkpoint's ``metadata`` file: the same across restarts of one checkpoint (also a checkpoint
copied elsewhere), new for a new or reset checkpoint. A sink learns it

* at query start from the checkpoint (:func:`owner_of_checkpoint`, which writes the file the
  way Spark does when the checkpoint is new, so Spark then uses the same id), or
* inside ``foreachBatch`` from the batch (:func:`owner_of_batch`: Spark sets the local
  property ``sql.streaming.queryId`` on the thread that calls the function).

A sink stores :attr:`SinkOwner.code` (a 63-bit digest of the id: a Delta ``txn`` version or a
Kafka offset holds it) and, where it can, the id itself, and decides with :func:`check_owner`.
A deliberate hand-over is explicit (``take_over=True``): the sink records the new owner and,
in the same atomic write, forgets the old owner's batch marker, so the new query's batch ids
start afresh; the old owner's next commit is refused.

Example
-------
>>> a = SinkOwner("bb347781-9b26-4093-aee3-509b8eb4e3f5")
>>> check_owner("events", "/t", None, a, take_over=False)
<OwnerDecision.FIRST: 'first'>
>>> check_owner("events", "/t", a.code, a, take_over=False)
<OwnerDecision.SAME: 'same'>
"""

from __future__ import annotations

import enum
import hashlib
import json
import logging
import os
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING

from spark_ext.sinks.errors import SinkConfigError, SinkOwnerError

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

__all__ = [
    "QUERY_ID_PROPERTY",
    "OwnerDecision",
    "SinkOwner",
    "check_owner",
    "owner_of_batch",
    "owner_of_checkpoint",
]

log = logging.getLogger(__name__)

#: The local property Spark sets to the query id on the thread that runs a micro-batch
#: (``StreamExecution.QUERY_ID_KEY``), also while it calls a ``foreachBatch`` function.
QUERY_ID_PROPERTY = "sql.streaming.queryId"

_CODE_MASK = (1 << 63) - 1


@dataclass(frozen=True)
class SinkOwner:
    """A streaming query that owns sink ids: Spark's query id (kept in its checkpoint)."""

    query_id: str

    def __post_init__(self) -> None:
        if not self.query_id:
            raise SinkConfigError("checkpoint", "the query id of a sink's owner is empty")

    @property
    def code(self) -> int:
        """A 63-bit digest of the query id, for stores that hold a number (``txn`` version,
        Kafka offset); stable across processes and machines."""
        digest = hashlib.sha256(self.query_id.encode()).digest()
        return int.from_bytes(digest[:8], "big") & _CODE_MASK

    def __str__(self) -> str:
        return self.query_id


class OwnerDecision(enum.Enum):
    """What a sink does about the owner it found recorded (:func:`check_owner`)."""

    #: No owner recorded yet: record this one (with the first write, or at start).
    FIRST = "first"
    #: This query owns the sink: go on.
    SAME = "same"
    #: Another query owns it and the caller hands it over on purpose: record this owner and
    #: forget the old owner's batch marker in the same atomic write.
    TAKE_OVER = "take_over"


def check_owner(
    sink_id: str,
    target: str,
    recorded: int | None,
    ours: SinkOwner,
    *,
    take_over: bool,
    recorded_name: str | None = None,
) -> OwnerDecision:
    """Decide about the owner ``recorded`` (its :attr:`SinkOwner.code`) of ``sink_id``.

    Raises :class:`~spark_ext.sinks.errors.SinkOwnerError` when another query owns the sink
    and ``take_over`` is false; ``recorded_name`` (the recorded query id, when the store keeps
    it) makes the message name it instead of its code.
    """
    if recorded is None:
        return OwnerDecision.FIRST
    if recorded == ours.code:
        return OwnerDecision.SAME
    if take_over:
        log.warning(
            "%s: sink %r handed over from query %s to query %s on purpose (take_over)",
            target,
            sink_id,
            recorded_name or f"#{recorded}",
            ours,
        )
        return OwnerDecision.TAKE_OVER
    raise SinkOwnerError(target, sink_id, recorded_name or f"#{recorded}", str(ours))


def owner_of_batch(df: DataFrame) -> SinkOwner | None:
    """The query running this ``foreachBatch`` call, or ``None`` outside a streaming query."""
    query_id = df.sparkSession.sparkContext.getLocalProperty(QUERY_ID_PROPERTY)
    return SinkOwner(query_id) if query_id else None


def owner_of_checkpoint(checkpoint: str | os.PathLike[str]) -> SinkOwner:
    """The query id kept in ``<checkpoint>/metadata``; written first if the checkpoint is new.

    Spark reads the file at query start and creates it only when missing
    (``StreamMetadata``), so writing it here in Spark's format makes the query that starts on
    this checkpoint carry this id. Raises :class:`SinkConfigError` for an unreadable file.
    """
    from pyarrow import fs as pafs

    location = os.fspath(checkpoint)
    if "://" not in location:
        location = os.path.abspath(location.removeprefix("file:"))
    filesystem, root = pafs.FileSystem.from_uri(location)
    path = f"{root.rstrip('/')}/metadata"
    if filesystem.get_file_info(path).type == pafs.FileType.File:
        with filesystem.open_input_stream(path) as f:
            raw = f.read().decode()
        try:
            return SinkOwner(json.loads(raw.splitlines()[0])["id"])
        except (ValueError, KeyError, IndexError) as e:
            raise SinkConfigError(
                "checkpoint", f"{location}/metadata is not a Spark query metadata file: {e}"
            ) from e
    owner = SinkOwner(str(uuid.uuid4()))
    filesystem.create_dir(root, recursive=True)
    tmp = f"{root.rstrip('/')}/.metadata.{uuid.uuid4().hex}.tmp"
    with filesystem.open_output_stream(tmp) as f:
        f.write(json.dumps({"id": owner.query_id}, separators=(",", ":")).encode())
    filesystem.move(tmp, path)
    log.info("%s: new checkpoint, query id %s written for Spark to use", location, owner)
    return owner
