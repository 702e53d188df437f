"""Errors of the tracker and the operators: one class per failure kind."""

from __future__ import annotations

from spark_ext.errors import ConfigError, SparkExtError

__all__ = [
    "AgentBehindCheckpoint",
    "CheckpointBehindAgent",
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
