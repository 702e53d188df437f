"""Where the Kafka sinks record "sink S has written batch B": committed offsets of the group
``spark_ext.sink:<sink id>`` on the output topic's partitions (no consumer joins it).

* Partition 0's metadata: ``{"sink": S, "batch": B, "parts": n, "owner": query id}`` (the
  sliced sink adds ``"slices"``); ``"batch": null`` after a first start or a take-over.
* Each output partition's end offset is its committed offset (metadata ``{"sink": S, "batch":
  B}``), so any partition count fits the metadata limit (K6 of issue #14); without them
  partition 0's offset is B.

The owner is the query id in that record (docs/design.md, "Kafka sinks", owner): at start
:meth:`SinkProgress.owner_decision` decides and, after the sink fenced older drivers,
:meth:`~SinkProgress.record_owner` writes; every batch re-reads it
(:meth:`~SinkProgress.check_still_owner`).
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from typing import Any

from connectors.kafka.names import KafkaSinkNames
from connectors.kafka.readback import end_offsets
from spark_ext import kafka_clients
from spark_ext.sinks.errors import ProgressInconsistentError, SinkOwnerError
from spark_ext.sinks.owner import OwnerDecision, SinkOwner, check_owner
from spark_ext.sinks.protocol import check_batch_order, validate_sink_id

__all__ = ["Recorded", "SinkProgress", "commit_offsets", "committed_offset"]

log = logging.getLogger(__name__)


def committed_offset(bootstrap: str, group: str, topic: str, stable: bool = True) -> Any:
    """``group``'s committed offset (with metadata) on ``topic``'s partition 0, or ``None``;
    ``stable``: waits for a transaction still completing."""
    from kafka import TopicPartition

    consumer = kafka_clients.consumer(
        bootstrap,
        group_id=group,
        enable_auto_commit=False,
        isolation_level="read_committed" if stable else "read_uncommitted",
    )
    try:
        return consumer.committed(TopicPartition(topic, 0), metadata=True)
    finally:
        consumer.close()


def commit_offsets(bootstrap: str, group: str, offsets: dict[Any, Any]) -> None:
    """Commit ``offsets`` (``TopicPartition`` -> ``OffsetAndMetadata``) for ``group``."""
    consumer = kafka_clients.consumer(bootstrap, group_id=group, enable_auto_commit=False)
    try:
        consumer.commit(offsets)
    finally:
        consumer.close()


@dataclass(frozen=True)
class Recorded:
    """What the progress group holds: the last batch and the end offsets recorded with it."""

    batch_id: int | None  # None: no batch yet (a first start, a take-over)
    end_offsets: dict[int, int]
    slices: int = 0  # (sliced sink) how many task slices it has ever used
    owner: str | None = None  # the owner's streaming query id


class SinkProgress:
    """The batch id a sink last wrote, as committed offsets of group ``spark_ext.sink:<id>``
    (read stable: a transaction still completing is waited for)."""

    def __init__(self, bootstrap: str, topic: str, sink_id: str) -> None:
        self.bootstrap = bootstrap
        self.topic = topic
        self.sink_id = validate_sink_id(sink_id)
        self.group = KafkaSinkNames(sink_id, topic).progress_group

    def read(self, stable: bool = True) -> Recorded | None:
        """The record, or ``None`` if this sink has none. ``stable=False``: without waiting for
        an open transaction (the start's owner read, docs/design.md, "Kafka sinks")."""
        got = committed_offset(self.bootstrap, self.group, self.topic, stable)
        if got is None or not got.metadata:
            return None
        meta = json.loads(got.metadata)
        if meta.get("sink") != self.sink_id:
            return None
        batch = None if meta.get("batch") is None else int(meta["batch"])
        parts = int(meta.get("parts", 0))
        ends = {0: got.offset} if parts else {}
        if parts > 1:
            ends.update(self._tagged_offsets(batch, parts))
        return Recorded(batch, ends, int(meta.get("slices", 0)), meta.get("owner"))

    def _tagged_offsets(self, batch: int | None, parts: int) -> dict[int, int]:
        """Committed offsets of partitions 1..parts-1, each checked to be of ``batch``."""
        from kafka import TopicPartition

        tps = [TopicPartition(self.topic, p) for p in range(1, parts)]
        with kafka_clients.admin(self.bootstrap) as admin:
            got = admin.list_group_offsets({self.group: tps})[self.group]
        ends = {}
        for tp in tps:
            part = got.get(tp)
            tag = json.loads(part.metadata) if part is not None and part.metadata else {}
            if tag.get("batch") != batch or tag.get("sink") != self.sink_id:
                raise ProgressInconsistentError(
                    f"group {self.group}: partition {tp.partition} of {self.topic} records "
                    f"{tag or 'nothing'}, partition 0 records batch {batch}"
                )
            ends[tp.partition] = part.offset
        return ends

    def offsets(
        self,
        batch_id: int | None,
        end_offsets: dict[int, int] | None = None,
        slices: int = 0,
        owner: str | None = None,
    ) -> dict[Any, Any]:
        """The offsets that record ``batch_id`` (and the end offset of every partition) for
        the owner ``owner``."""
        from kafka import TopicPartition
        from kafka.structs import OffsetAndMetadata

        ends = end_offsets or {}
        if ends and sorted(ends) != list(range(len(ends))):
            raise ValueError(f"end offsets of partitions {sorted(ends)} are not 0..n-1")
        fields: dict[str, Any] = {"sink": self.sink_id, "batch": batch_id, "parts": len(ends)}
        if slices:
            fields["slices"] = slices
        if owner is not None:
            fields["owner"] = owner
        head = json.dumps(fields)
        tag = json.dumps({"sink": self.sink_id, "batch": batch_id})
        first = ends.get(0, batch_id if batch_id is not None else 0)
        out = {TopicPartition(self.topic, 0): OffsetAndMetadata(first, head, -1)}
        for p in range(1, len(ends)):
            out[TopicPartition(self.topic, p)] = OffsetAndMetadata(ends[p], tag, -1)
        return out

    def record(
        self,
        batch_id: int | None,
        end_offsets: dict[int, int],
        slices: int = 0,
        owner: str | None = None,
    ) -> None:
        """Record ``batch_id`` outside a transaction (idempotent and sliced sinks): one commit."""
        commit_offsets(
            self.bootstrap, self.group, self.offsets(batch_id, end_offsets, slices, owner)
        )

    def owner_decision(self, owner: SinkOwner, *, take_over: bool) -> OwnerDecision:
        """The owner decision at start (raises :class:`SinkOwnerError` for another owner unless
        ``take_over``); reads only."""
        recorded = self.read(stable=False)
        name = recorded.owner if recorded is not None else None
        code = SinkOwner(name).code if name else None
        decision = check_owner(
            self.sink_id, self.topic, code, owner, take_over=take_over, recorded_name=name
        )
        if (
            decision is OwnerDecision.FIRST
            and recorded is not None
            and recorded.batch_id is not None
        ):
            log.warning(
                "%s: sink %r recorded batch %d without an owner; adopted by query %s",
                self.topic,
                self.sink_id,
                recorded.batch_id,
                owner,
            )
        return decision

    def record_owner(self, owner: SinkOwner, decision: OwnerDecision) -> None:
        """Write the record ``decision`` needs (after the sink fenced older drivers)."""
        if decision is OwnerDecision.SAME:
            return
        recorded = self.read()
        slices = recorded.slices if recorded is not None else 0
        if (
            decision is OwnerDecision.FIRST
            and recorded is not None
            and recorded.batch_id is not None
        ):
            batch, ends = recorded.batch_id, recorded.end_offsets
        else:
            batch, ends = None, end_offsets(self.bootstrap, self.topic)
        self.record(batch, ends, slices=slices, owner=owner.query_id)
        log.info(
            "%s: sink %r owned by query %s (%s, batch %s recorded)",
            self.topic,
            self.sink_id,
            owner,
            decision.value,
            batch,
        )

    def check_still_owner(self, batch_id: int, owner: str | None) -> tuple[Recorded | None, bool]:
        """The record a commit of ``batch_id`` is made against, and whether it recorded that
        batch already: :class:`SinkOwnerError` if it names another owner than ``owner``
        (``None``: unchecked), ``BatchRegressionError`` for a batch below it."""
        recorded = self.read()
        if owner is not None and recorded is not None and recorded.owner not in (None, owner):
            raise SinkOwnerError(self.topic, self.sink_id, recorded.owner, owner)
        done = check_batch_order(self.sink_id, batch_id, recorded.batch_id if recorded else None)
        return recorded, done
