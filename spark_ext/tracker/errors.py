"""Errors of the tracker and the operators: one class per failure kind."""

from __future__ import annotations

from spark_ext.errors import ConfigError, SparkExtError

__all__ = [
    "AgentBehindCheckpoint",
    "CheckpointBehindAgent",
    "CheckpointLayoutMismatch",
    "ConfigError",
    "PartitionSetMismatch",
    "ReportConflict",
    "TrackerError",
    "TrackerLogCorrupt",
    "TrackerUnavailable",
]


class TrackerError(SparkExtError):
    """Base class of the tracking agent's errors."""


class TrackerUnavailable(TrackerError, RuntimeError):
    """The tracking agent's log (a folder or Kafka topics) cannot be reached."""


class TrackerLogCorrupt(TrackerError, RuntimeError):
    """A record in the middle of the agent's log cannot be read (a torn tail is not this)."""


class ReportConflict(TrackerError, ValueError):
    """Two reports disagree on a fact that must be stable (e.g. a substream's end time)."""


class CheckpointBehindAgent(TrackerError, RuntimeError):
    """The agent has applied reports of batches the query's checkpoint never reached.

    The checkpoint was reset (or replaced by an older one) while the agent was kept: every
    report of the restarted query would look like a duplicate and nothing would ever end.
    Start the query under a new name, or reset the agent together with the checkpoint.
    """


class CheckpointLayoutMismatch(TrackerError, RuntimeError):
    """The checkpoint holds state laid out for another tracked query than the one starting.

    Operator state is keyed by shard and substream: resuming it with another shard count,
    windowing, namespace or operator would strand groups in shards no row reaches any more (a
    silent loss) or split one window between two shards (a silent double row). A checkpoint
    with batches but no layout record was written by a spark_ext version before the record
    existed, or by a query that is not tracked. Start from a new checkpoint and a new agent
    (replaying the source), or restart with the layout the checkpoint names.
    """


class AgentBehindCheckpoint(TrackerError, RuntimeError):
    """The checkpoint has read end events the agent does not have (the agent's log was lost).

    New end events would be numbered below what the query already read and never be seen.
    Restore the agent's log, or reset the checkpoint together with the agent.
    """


class PartitionSetMismatch(ConfigError):
    """The declared source partitions differ from the topic's partitions.

    More declared than exist: windows wait forever for a partition that never sends.
    Fewer: a partition's rows are not waited for (they go to the late output).
    """
