"""Errors of the exactly-once Kafka sinks: one class per failure kind, all :class:`SinkError`.

Each docstring says whether anything of the batch may be committed when it is raised (the
convention of :mod:`spark_ext.sinks.errors`, which holds the errors every sink shares).
"""

from __future__ import annotations

from collections.abc import Iterable

from spark_ext.sinks.errors import SinkConfigError, SinkError


class ProduceFailedError(SinkError):
    """Records of a batch were not acknowledged by the broker (K1 of issue #14).

    kafka-python fails the future of a record whose produce request expired after
    ``delivery_timeout_ms`` (a partition leader unavailable, a broker paused) yet leaves its
    transaction committable; committing would record the batch without those records and
    every replay would skip them. The two-phase sink therefore checks every future before
    recording the batch: on any failure the transaction is aborted and this is raised, so
    nothing of the batch is committed. The idempotent sink raises it before recording the
    batch; the records that did land are recognised by their ids when the batch is re-run.
    Spark fails the batch; a restart re-runs it.
    """

    def __init__(
        self, sink_id: str, batch_id: int, failed: int, partitions: Iterable[int], cause: object
    ) -> None:
        self.sink_id = sink_id
        self.batch_id = batch_id
        self.failed = failed
        self.partitions = set(partitions)
        self.cause = cause
        super().__init__(
            f"sink {sink_id!r} batch {batch_id}: {failed} record(s) to partition(s) "
            f"{sorted(self.partitions)} were not delivered ({cause!r}); nothing of the batch "
            "was recorded"
        )


class PartitionOutOfRangeError(SinkError):
    """A row's ``partition`` column names a partition the output topic does not have.

    Raised before the batch is recorded; the two-phase sink aborts its transaction first, so
    nothing of the batch is committed.
    """

    def __init__(self, topic: str, partition: int, partitions: Iterable[int]) -> None:
        self.topic = topic
        self.partition = partition
        self.partitions = sorted(partitions)
        super().__init__(
            f"a row names partition {partition} of topic {topic!r}, which has partitions "
            f"{self.partitions[0] if self.partitions else '-'}..{self.partitions[-1] if self.partitions else '-'}"
        )


class TopicMissingError(SinkConfigError):
    """A topic the query reads or writes does not exist; raised before the query starts.

    Never auto-created: the broker would create an output topic with its default partition
    count (and Spark's reader would fail after start with a long JVM trace).
    """

    def __init__(self, topic: str, role: str) -> None:
        self.topic = topic
        self.role = role
        super().__init__("topic", f"the {role} topic {topic!r} does not exist")


class ReplayUnprovableError(SinkError):
    """The idempotent sink cannot read back what a re-run batch already wrote (K4).

    The output topic's log start offset is above the offsets recorded with the previous
    batch (retention or ``delete_records`` trimmed records written since), so the records of
    the re-run batch that are already there cannot be told apart from the ones that are not.
    Guessing would lose or duplicate records; nothing of the batch is written.
    """

    def __init__(self, sink_id: str, batch_id: int, trimmed: dict[int, tuple[int, int]]) -> None:
        self.sink_id = sink_id
        self.batch_id = batch_id
        self.trimmed = trimmed
        detail = ", ".join(
            f"partition {p}: recorded {since}, log starts at {start}"
            for p, (since, start) in sorted(trimmed.items())
        )
        super().__init__(
            f"sink {sink_id!r} batch {batch_id}: the output was trimmed below what the previous "
            f"batch recorded ({detail}); what this replay already wrote cannot be proven; "
            "nothing written"
        )


class TransactionExpiredError(SinkError):
    """A two-phase batch outlived ``transaction_timeout_ms`` and the broker aborted it (K5).

    Nothing of the batch is committed. Raised after the sink retried the batch once in a
    fresh transaction and that one expired too: the batch is too large for the timeout (a
    backlog after an outage without ``maxOffsetsPerTrigger``). Raise the
    ``transaction_timeout_ms`` option (at most the broker's ``transaction.max.timeout.ms``) or
    bound the batch with ``maxOffsetsPerTrigger``.
    """

    def __init__(self, sink_id: str, batch_id: int, elapsed_ms: int, timeout_ms: int) -> None:
        self.sink_id = sink_id
        self.batch_id = batch_id
        self.elapsed_ms = elapsed_ms
        self.timeout_ms = timeout_ms
        super().__init__(
            f"sink {sink_id!r} batch {batch_id}: the transaction ran {elapsed_ms} ms, past "
            f"transaction_timeout_ms={timeout_ms}, and was aborted by the broker (also on a "
            "retry); raise transaction_timeout_ms or lower maxOffsetsPerTrigger; nothing committed"
        )


class ProgressInconsistentError(SinkError):
    """The committed offsets of a sink-progress group do not all belong to one recorded batch.

    Nothing is written: the recorded end offsets are where a replay reads back from.
    """
