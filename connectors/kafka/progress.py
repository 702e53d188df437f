"""Where the Kafka sinks record "sink S has written batch B": committed offsets of the group
``spark_ext.sink:<sink id>`` on the output topic's partitions (no consumer joins it).

* Partition 0's metadata: ``{"sink": S, "batch": B, "parts": n, "owner": query id}`` (the
  sliced sink adds ``"slices"``, how many slice transactional ids it has used).
* The end offset of each output partition is that partition's committed offset (``parts`` of
  them, metadata ``{"sink": S, "batch": B}``), so any partition count fits the metadata limit
  (K6 of issue #14; the earlier format, every end offset in partition 0's metadata, is read);
  without end offsets partition 0's offset is the batch id.
* A first start or a take-over records ``"batch": null`` with the end offsets of that moment.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from connectors.kafka.names import KafkaSinkNames
from spark_ext import kafka_clients
from spark_ext.sinks.errors import ProgressInconsistentError
from spark_ext.sinks.protocol import validate_sink_id

__all__ = ["Recorded", "SinkProgress"]


@dataclass(frozen=True)
class Recorded:
    """What the progress group holds: the last batch and the end offsets recorded with it."""

    #: The last batch written by the owner; ``None``: none yet (a first start, a take-over).
    batch_id: int | None
    end_offsets: dict[int, int]
    #: (sliced two-phase sink) How many task slices the sink has ever used: the transactional
    #: ids ``...s0`` to ``...s<slices-1>`` a start-up checks for lingering transactions.
    slices: int = 0
    #: The streaming query id of the sink's owner (``None``: a record without one).
    owner: str | None = None


class SinkProgress:
    """The batch id a sink last wrote, as committed offsets of group ``spark_ext.sink:<id>``
    (read stable: a transaction still completing is waited for)."""

    def __init__(self, bootstrap: str, topic: str, sink_id: str) -> None:
        self.bootstrap = bootstrap
        self.topic = topic
        self.sink_id = validate_sink_id(sink_id)
        self.group = KafkaSinkNames(sink_id, topic).progress_group

    def _consumer(self, stable: bool = True) -> Any:
        return kafka_clients.consumer(
            self.bootstrap,
            group_id=self.group,
            enable_auto_commit=False,
            isolation_level="read_committed" if stable else "read_uncommitted",
        )

    def read(self, stable: bool = True) -> Recorded | None:
        """The record, or ``None`` if this sink has none. ``stable=False``: without waiting for
        an open transaction (the start's owner read, docs/design.md, "Kafka sinks")."""
        from kafka import TopicPartition

        consumer = self._consumer(stable)
        try:
            got = consumer.committed(TopicPartition(self.topic, 0), metadata=True)
            if got is None or not got.metadata:
                return None
            meta = json.loads(got.metadata)
            if meta.get("sink") != self.sink_id:
                return None
            batch = None if meta.get("batch") is None else int(meta["batch"])
            slices = int(meta.get("slices", 0))
            owner = meta.get("owner")
            if "ends" in meta:  # the earlier format: every end offset in this metadata
                ends = {int(p): int(o) for p, o in meta["ends"].items()}
                return Recorded(batch, ends, slices, owner)
            parts = int(meta.get("parts", 0))
        finally:
            consumer.close()
        ends = {0: got.offset} if parts else {}
        if parts > 1:
            ends.update(self._tagged_offsets(batch, parts))
        return Recorded(batch, ends, slices, owner)

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
        consumer = self._consumer()
        try:
            consumer.commit(self.offsets(batch_id, end_offsets, slices, owner))
        finally:
            consumer.close()
