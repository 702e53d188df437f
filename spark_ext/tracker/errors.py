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
    """The agent applied batches the query's checkpoint never reached (a reset checkpoint)."""


class CheckpointLayoutMismatch(TrackerError, RuntimeError):
    """The checkpoint's state is laid out for another tracked query, or has batches but no
    layout record (docs/design.md, "Tracked queries")."""


class AgentBehindCheckpoint(TrackerError, RuntimeError):
    """The checkpoint has read end events the agent does not have (its log was lost)."""


class PartitionSetMismatch(ConfigError):
    """The declared source partitions differ from the topic's partitions."""
