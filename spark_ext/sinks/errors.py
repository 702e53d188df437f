"""Errors of the exactly-once sinks (the protocol, Delta, Kafka): one class per failure kind.

Each class says whether the batch may be committed when it is raised (docs/design.md, "Sink
commit protocol", errors).
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
    "MixedDeltaWritersError",
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
    """The rows do not fit the target table's schema; nothing committed, never retried."""

    def __init__(self, target: str, expected: str, actual: str) -> None:
        self.target, self.expected, self.actual = target, expected, actual
        super().__init__(
            f"schema of the rows does not match {target}: table has {expected}, rows have {actual}"
        )


class ConcurrentWriterError(SinkError):
    """Another writer with the sink id committed first; this batch is not committed by it."""


class WriterFencedError(SinkError):
    """A newer producer or attempt with the same transactional id or claim took over; stop."""


class CommitUncertainError(SinkError):
    """The commit was sent but its outcome could not be read back; a restart is safe."""


class BatchRegressionError(SinkError):
    """A batch id below the one this sink id recorded (invariant 6); nothing written."""

    def __init__(self, sink_id: str, batch_id: int, recorded: int) -> None:
        self.sink_id, self.batch_id, self.recorded = sink_id, batch_id, recorded
        super().__init__(
            f"sink {sink_id!r}: batch {batch_id} is below the recorded batch {recorded} "
            "(checkpoint reset or deleted while the output was kept, a second query with this "
            "sink id, or a zombie driver); nothing written"
        )


class SinkOwnerError(SinkError):
    """Another query owns this sink id; nothing of the batch committed."""

    def __init__(self, target: str, sink_id: str, recorded: str, ours: str) -> None:
        self.target, self.sink_id, self.recorded, self.ours = target, sink_id, recorded, ours
        super().__init__(
            f"{target}: sink {sink_id!r} is owned by query {recorded}, not by this query "
            f"({ours}); give this query its own sink_id, or pass take_over=True to hand the "
            "sink over on purpose; nothing written"
        )


class StagedDataMissingError(SinkError):
    """A commit message names staged output that is gone; nothing committed, re-run on restart."""


class TransactionTimeoutError(SinkConfigError):
    """The Kafka transaction timeout is above the broker's ``transaction.max.timeout.ms``."""


class NotAStreamTaskError(SinkError):
    """A sink's task-side code ran outside a micro-batch task; nothing staged."""


class DeltaTxnExpiredError(SinkError):
    """The target holds this sink's committed output but its ``txn`` expired; nothing written
    or deleted (docs/design.md, "Delta sinks", expiry). Fix: raise or unset the table's
    ``delta.setTransactionRetentionDuration``, or start a new sink id on purpose."""

    def __init__(self, target: str, sink_id: str, files: int) -> None:
        self.target, self.sink_id = target, sink_id
        self.files = files  # files (two-phase) or commits (idempotent) of the sink still logged
        super().__init__(
            f"{target}: sink {sink_id!r} wrote this table ({files} of its files/commits still in "
            "the log) but its txn is gone "
            "(expired by delta.setTransactionRetentionDuration?); refusing to write or clean"
        )


class DriverFencedError(SinkError):
    """A newer start of the sink fenced this driver; its batch is not committed."""

    def __init__(self, target: str, sink_id: str, epoch: int, current: int) -> None:
        self.target, self.sink_id, self.epoch, self.current = target, sink_id, epoch, current
        super().__init__(
            f"{target}: sink {sink_id!r} run {epoch} was fenced by a newer start (run {current}); "
            "nothing committed by this driver"
        )


class UnsupportedTableFeatureError(SinkConfigError):
    """The target uses ``feature``, which the sink cannot write correctly; nothing written
    (docs/design.md, "Delta sinks", tables refused). Fix: the idempotent mode, or another table."""

    def __init__(self, target: str, feature: str, detail: str) -> None:
        self.target, self.feature, self.detail = target, feature, detail
        super().__init__("path", f"{target}: {feature} is not supported by this sink: {detail}")


class DeltaTargetPathError(SinkConfigError):
    """The target path is a file or a folder of other files without ``_delta_log``; at start."""

    def __init__(self, path: str, reason: str) -> None:
        self.path, self.reason = path, reason
        super().__init__(
            "path", f"{path} {reason}; give the sink a Delta table or a missing or empty folder"
        )


class MixedDeltaWritersError(SinkConfigError):
    """A Delta table on object storage was written by a kind of writer whose commits this
    sink's cannot exclude (docs/design.md, "Object storage", writers sharing a table); at
    start, nothing written. Fix: one kind of writer per table on S3 (README)."""

    def __init__(self, target: str, ours: str, theirs: str, version: int) -> None:
        self.target, self.ours, self.theirs, self.version = target, ours, theirs, version
        super().__init__(
            "path",
            f"{target}: {ours} cannot share a table on object storage with {theirs} (it wrote "
            f"version {version}): their commits can overwrite each other's; write this table "
            "with one kind of writer, or use another table",
        )


class DeltaCommitRefusedError(SinkError):
    """delta-rs refused a commit and no other commit landed meanwhile; nothing committed."""

    def __init__(self, target: str, batch_id: int, cause: str) -> None:
        self.target, self.batch_id, self.cause = target, batch_id, cause
        super().__init__(f"{target}: batch {batch_id}: delta-rs refused the commit ({cause})")


# -- Kafka sinks -------------------------------------------------------------------------


class ProduceFailedError(SinkError):
    """Records of a batch were not acknowledged (K1); the batch is not recorded."""

    def __init__(
        self, sink_id: str, batch_id: int, failed: int, partitions: Iterable[int], cause: object
    ) -> None:
        self.sink_id, self.batch_id, self.failed = sink_id, batch_id, failed
        self.partitions = set(partitions)
        self.cause = cause
        super().__init__(
            f"sink {sink_id!r} batch {batch_id}: {failed} record(s) to partition(s) "
            f"{sorted(self.partitions)} were not delivered ({cause!r}); nothing of the batch "
            "was recorded"
        )


class PartitionOutOfRangeError(SinkError):
    """A row names a partition the output topic does not have; the batch is not recorded."""

    def __init__(self, topic: str, partition: int, partitions: Iterable[int]) -> None:
        self.topic, self.partition = topic, partition
        self.partitions = sorted(partitions)
        super().__init__(
            f"a row names partition {partition} of topic {topic!r}, which has partitions "
            f"{self.partitions[0] if self.partitions else '-'}..{self.partitions[-1] if self.partitions else '-'}"
        )


class TopicMissingError(SinkConfigError):
    """A topic the query reads or writes does not exist (it is never auto-created)."""

    def __init__(self, topic: str, role: str) -> None:
        self.topic, self.role = topic, role
        super().__init__("topic", f"the {role} topic {topic!r} does not exist")


class ReplayUnprovableError(SinkError):
    """The output was trimmed below the offsets a replay reads back from (K4); nothing written."""

    def __init__(self, sink_id: str, batch_id: int, trimmed: dict[int, tuple[int, int]]) -> None:
        self.sink_id, self.batch_id, self.trimmed = sink_id, batch_id, trimmed
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
    """The broker aborted a batch's transaction past ``transaction_timeout_ms``; nothing committed."""

    def __init__(self, sink_id: str, batch_id: int, elapsed_ms: int, timeout_ms: int) -> None:
        self.sink_id, self.batch_id = sink_id, batch_id
        self.elapsed_ms, self.timeout_ms = elapsed_ms, timeout_ms
        super().__init__(
            f"sink {sink_id!r} batch {batch_id}: the transaction ran {elapsed_ms} ms, past "
            f"transaction_timeout_ms={timeout_ms}, and was aborted by the broker (also on a "
            "retry); raise transaction_timeout_ms or lower maxOffsetsPerTrigger; nothing committed"
        )


class ClientStalledError(SinkError):
    """A Kafka client call outlived its own timeout; nothing of the slice committed."""

    def __init__(self, what: str, waited_s: float) -> None:
        self.what, self.waited_s = what, waited_s
        super().__init__(
            f"{what}: no answer after {waited_s:.0f} s (the client ignored its timeout: a "
            "stalled or restarted coordinator); nothing of the slice committed, the task fails "
            "so that its retry fences the stalled producer"
        )


class ProgressInconsistentError(SinkError):
    """The offsets of a sink-progress group do not belong to one recorded batch; nothing written."""
