"""Errors of the exactly-once sinks (the protocol, Delta, Kafka): one class per failure kind.

A caller catches the class, never matches a message. Every class says whether the batch may
have been committed when it is raised, which is what decides whether a retry is safe.
"""

from __future__ import annotations

from collections.abc import Iterable

from spark_ext.errors import ConfigError, SparkExtError

__all__ = [
    "BatchRegressionError",
    "ClientStalledError",
    "CommitUncertainError",
    "ConcurrentWriterError",
    "DeltaCommitRefusedError",
    "DeltaTargetPathError",
    "DeltaTxnExpiredError",
    "DriverFencedError",
    "NotAStreamTaskError",
    "PartitionOutOfRangeError",
    "ProduceFailedError",
    "ProgressInconsistentError",
    "ReplayUnprovableError",
    "SchemaMismatchError",
    "SinkConfigError",
    "SinkError",
    "SinkOwnerError",
    "StagedDataMissingError",
    "TopicMissingError",
    "TransactionExpiredError",
    "TransactionTimeoutError",
    "UnsupportedTableFeatureError",
    "WriterFencedError",
]


class SinkError(SparkExtError):
    """Base class of every error an exactly-once sink raises on purpose."""


class SinkConfigError(SinkError, ConfigError):
    """A sink option is missing or wrong; raised when the query is built, before any batch."""


class SchemaMismatchError(SinkError):
    """The rows to append do not fit the target table's schema.

    Raised before anything of the batch is committed (the table is unchanged), so it is never
    retried: the pipeline or the table has to change.
    """

    def __init__(self, target: str, expected: str, actual: str) -> None:
        self.target = target
        self.expected = expected
        self.actual = actual
        super().__init__(
            f"schema of the rows does not match {target}: table has {expected}, rows have {actual}"
        )


class ConcurrentWriterError(SinkError):
    """Another writer changed the target between this sink's check and its commit.

    For the Delta sinks: a second writer with the same sink id recorded the same or a later
    batch (two queries share one sink id, or a zombie driver). The batch is *not* committed
    by this writer; retrying it is safe only because the commit re-checks the recorded batch
    first, which the sinks do a bounded number of times before raising this.
    """


class WriterFencedError(SinkError):
    """A newer producer with the same transactional id took over; this one must stop.

    Raised by the two-phase Kafka sink when its transaction was fenced (a restarted driver
    took over). This writer's open transaction is aborted by the broker; never retried here.
    """


class CommitUncertainError(SinkError):
    """The commit was sent but its outcome could not be learned (the answer was lost).

    Raised only after the sink tried to resolve the outcome (by fencing the transaction and
    reading the recorded batch back) and could not reach the broker. Restarting the query
    is safe: the replayed batch is recognised if it did commit.
    """


class BatchRegressionError(SinkError):
    """A batch id below the one this sink id last recorded: nothing is written.

    Spark only ever replays the batch it recorded last (``recorded == batch_id``). A lower id
    means the query's checkpoint was deleted or reset while the output was kept, a second query
    writes with the same sink id, or a zombie driver is still running. Skipping would lose the
    batch silently; writing would duplicate it. Nothing of the batch is committed.
    """

    def __init__(self, sink_id: str, batch_id: int, recorded: int) -> None:
        self.sink_id = sink_id
        self.batch_id = batch_id
        self.recorded = recorded
        super().__init__(
            f"sink {sink_id!r}: batch {batch_id} is below the recorded batch {recorded} "
            "(checkpoint reset or deleted while the output was kept, a second query with this "
            "sink id, or a zombie driver); nothing written"
        )


class SinkOwnerError(SinkError):
    """Another query owns this sink id: nothing is written (issue #24, N11).

    Every sink records, next to ``(sink id, batch id)``, the streaming query that owns the sink
    (Spark's query id, kept in the checkpoint's ``metadata`` file: the same across restarts of
    one checkpoint, new for a new or reset checkpoint). A second query with the same sink id
    would otherwise take its batch 0 for a replay of the first query's batch 0 and skip it.
    Raised before anything of a batch is committed. Give the query its own sink id, or hand
    the sink over on purpose (``take_over=True``: the new query's batch ids start again).
    """

    def __init__(self, target: str, sink_id: str, recorded: str, ours: str) -> None:
        self.target = target
        self.sink_id = sink_id
        self.recorded = recorded
        self.ours = ours
        super().__init__(
            f"{target}: sink {sink_id!r} is owned by query {recorded}, not by this query "
            f"({ours}); give this query its own sink_id, or pass take_over=True to hand the "
            "sink over on purpose; nothing written"
        )


class StagedDataMissingError(SinkError):
    """A commit message points at staged output that is gone (removed by hand or by abort).

    Nothing is committed; the batch fails and Spark re-runs it after a restart.
    """


class TransactionTimeoutError(SinkConfigError):
    """The Kafka transaction timeout is above the broker's ``transaction.max.timeout.ms``."""


class NotAStreamTaskError(SinkError):
    """A sink's task-side code ran outside a micro-batch task (no batch id to stage under).

    Raised before anything is staged: the stream writer was called from a batch job or from
    the driver. Nothing of any batch is affected.
    """


class DeltaTxnExpiredError(SinkError):
    """The target holds this sink's committed output but no ``txn`` for its sink id.

    Delta drops a ``txn`` older than ``delta.setTransactionRetentionDuration`` when a snapshot
    is read, so after a stop longer than that the sink can no longer tell a replay from a new
    batch. Nothing is deleted and nothing is written: committing would duplicate a replayed
    batch, and removing "orphans" would remove committed files. Raise the retention (or unset
    it) on the table, or start a new sink id on purpose.
    """

    def __init__(self, target: str, sink_id: str, files: int) -> None:
        self.target = target
        self.sink_id = sink_id
        self.files = files  # files (two-phase) or commits (idempotent) of the sink still logged
        super().__init__(
            f"{target}: sink {sink_id!r} wrote this table ({files} of its files/commits still in "
            "the log) but its txn is gone "
            "(expired by delta.setTransactionRetentionDuration?); refusing to write or clean"
        )


class DriverFencedError(SinkError):
    """A newer start of the same sink fenced this driver; this driver's batch is not committed.

    Each start of a two-phase sink records a run epoch before it removes orphaned staging (the
    Delta sink: ``txn(<sink id>:run, epoch)`` in the table, checked on the snapshot every commit
    is made against; the Kafka sink: see :mod:`connectors.kafka.commit`), so an older driver
    still running (a re-run notebook cell, a hung driver) can never commit staging the newer
    start deleted. Never retried: the older driver must stop.
    """

    def __init__(self, target: str, sink_id: str, epoch: int, current: int) -> None:
        self.target = target
        self.sink_id = sink_id
        self.epoch = epoch
        self.current = current
        super().__init__(
            f"{target}: sink {sink_id!r} run {epoch} was fenced by a newer start (run {current}); "
            "nothing committed by this driver"
        )


class UnsupportedTableFeatureError(SinkConfigError):
    """The target table uses a feature the sink cannot write correctly; raised at start.

    ``feature`` names it (partitioning, a NOT NULL column the rows may break, CHECK
    constraints, generated or identity columns, column mapping, a writer feature this sink
    does not implement). Nothing is written; use the idempotent mode (Spark's Delta writer
    honours these) or another table.
    """

    def __init__(self, target: str, feature: str, detail: str) -> None:
        self.target = target
        self.feature = feature
        self.detail = detail
        super().__init__("path", f"{target}: {feature} is not supported by this sink: {detail}")


class DeltaTargetPathError(SinkConfigError):
    """The target path of a Delta sink is no Delta table and cannot become one; at start.

    A file, or a folder holding other files but no ``_delta_log`` (someone's data: making a
    table there would wrap their files). Nothing is written; give the sink a Delta table or a
    missing or empty folder.
    """

    def __init__(self, path: str, reason: str) -> None:
        self.path = path
        self.reason = reason
        super().__init__(
            "path", f"{path} {reason}; give the sink a Delta table or a missing or empty folder"
        )


class DeltaCommitRefusedError(SinkError):
    """delta-rs refused a commit and no other commit landed meanwhile: not a lost race.

    Nothing is committed and the commit is not retried (a lost race is re-checked and retried;
    this is not one). ``cause`` is delta-rs' message.
    """

    def __init__(self, target: str, batch_id: int, cause: str) -> None:
        self.target = target
        self.batch_id = batch_id
        self.cause = cause
        super().__init__(f"{target}: batch {batch_id}: delta-rs refused the commit ({cause})")


# -- Kafka sinks -------------------------------------------------------------------------


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


class ClientStalledError(SinkError):
    """A Kafka client call outlived its own timeout and was given up (a stalled coordinator:
    docs/design.md, "Kafka sinks"). Nothing of the slice is committed; Spark's retry of the
    task fences the stalled producer and aborts its transaction."""

    def __init__(self, what: str, waited_s: float) -> None:
        self.what = what
        self.waited_s = waited_s
        super().__init__(
            f"{what}: no answer after {waited_s:.0f} s (the client ignored its timeout: a "
            "stalled or restarted coordinator); nothing of the slice committed, the task fails "
            "so that its retry fences the stalled producer"
        )


class ProgressInconsistentError(SinkError):
    """The committed offsets of a sink-progress group do not all belong to one recorded batch.

    Nothing is written: the recorded end offsets are where a replay reads back from.
    """
