"""Who owns a sink id: the streaming query whose checkpoint writes it (issue #24, N11).

Why and how: docs/design.md, "Sink commit protocol", owner.

>>> a = SinkOwner("bb347781-9b26-4093-aee3-509b8eb4e3f5")
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
from spark_ext.storage import Location, StorageSettings

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

__all__ = [
    "QUERY_ID_PROPERTY",
    "OwnerDecision",
    "SinkOwner",
    "check_owner",
    "owner_of",
    "owner_of_checkpoint",
]

log = logging.getLogger(__name__)

#: Spark's local property holding the query id of a micro-batch (``StreamExecution.QUERY_ID_KEY``).
QUERY_ID_PROPERTY = "sql.streaming.queryId"

_CODE_MASK = (1 << 63) - 1


@dataclass(frozen=True)
class SinkOwner:
    """A streaming query that owns sink ids: Spark's query id."""

    query_id: str

    def __post_init__(self) -> None:
        if not self.query_id:
            raise SinkConfigError("checkpoint", "the query id of a sink's owner is empty")

    @property
    def code(self) -> int:
        """A 63-bit digest of the query id (a ``txn`` version or a Kafka offset holds it)."""
        digest = hashlib.sha256(self.query_id.encode()).digest()
        return int.from_bytes(digest[:8], "big") & _CODE_MASK

    def __str__(self) -> str:
        return self.query_id


class OwnerDecision(enum.Enum):
    """What a sink does about the owner it found recorded (:func:`check_owner`)."""

    FIRST = "first"  # none recorded: record this one
    SAME = "same"
    TAKE_OVER = "take_over"  # record this one and forget the old batch marker, in one write


def check_owner(
    sink_id: str,
    target: str,
    recorded: int | None,
    ours: SinkOwner,
    *,
    take_over: bool,
    recorded_name: str | None = None,
) -> OwnerDecision:
    """Decide about the owner ``recorded`` (a :attr:`SinkOwner.code`) of ``sink_id``, or raise
    :class:`SinkOwnerError`; ``recorded_name`` (the recorded query id, if kept) names it."""
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


def owner_of_checkpoint(
    checkpoint: str | os.PathLike[str] | Location, settings: StorageSettings | None = None
) -> SinkOwner:
    """The query id in ``<checkpoint>/metadata`` (a local path or a URI such as
    ``s3a://bucket/chk``; ``settings``: of object storage, default the session's), written in
    Spark's format if the checkpoint is new; :class:`SinkConfigError` for an unreadable file."""
    from spark_ext import storage

    location = Location.parse(
        checkpoint if isinstance(checkpoint, Location) else os.fspath(checkpoint)
    )
    metadata = location.join("metadata")
    try:
        raw = storage.read_bytes(metadata, settings).decode()
    except FileNotFoundError:
        raw = None
    if raw is not None:
        try:
            return SinkOwner(json.loads(raw.splitlines()[0])["id"])
        except (ValueError, KeyError, IndexError) as e:
            raise SinkConfigError(
                "checkpoint", f"{metadata} is not a Spark query metadata file: {e}"
            ) from e
    owner = SinkOwner(str(uuid.uuid4()))
    storage.write_bytes(
        metadata, json.dumps({"id": owner.query_id}, separators=(",", ":")).encode(), settings
    )
    log.info("%s: new checkpoint, query id %s written for Spark to use", location, owner)
    return owner


def owner_of(df: DataFrame, explicit: SinkOwner | None, name: str) -> SinkOwner:
    """The owner of a ``foreachBatch`` writer: ``explicit``, else the query running ``df``
    (:data:`QUERY_ID_PROPERTY`); :class:`SinkConfigError` naming ``owner`` without either."""
    if explicit is not None:
        return explicit
    query_id = df.sparkSession.sparkContext.getLocalProperty(QUERY_ID_PROPERTY)
    if not query_id:
        raise SinkConfigError(
            "owner",
            f"{name} runs outside a streaming query: pass owner=SinkOwner(<query id>) to say "
            "which query owns the sink",
        )
    return SinkOwner(query_id)
