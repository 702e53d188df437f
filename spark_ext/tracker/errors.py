"""Errors of the tracker and the operators: one class per failure kind."""

from __future__ import annotations

from spark_ext.errors import ConfigError, SparkExtError

__all__ = [
    "ConfigError",
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
