"""Exception classes of spark_ext: one class per failure kind, so callers catch, never match strings.

Every error raised on purpose by spark_ext or connectors derives from :class:`SparkExtError`.
"""

from __future__ import annotations

__all__ = ["BrokerError", "ConfigError", "JarsNotFetched", "SparkExtError"]


class SparkExtError(Exception):
    """Base class of every error spark_ext raises on purpose."""


class ConfigError(SparkExtError, ValueError):
    """A configuration setting is missing, unknown or has a wrong value.

    Raised at start-up, before any query runs. ``setting`` names the offending setting
    (for example ``"spark.shuffle_partitions"``) so the message points at what to fix.
    """

    def __init__(self, setting: str, message: str) -> None:
        self.setting = setting
        super().__init__(f"{setting}: {message}")


class JarsNotFetched(SparkExtError, FileNotFoundError):
    """The JVM jars (Delta, Spark's Kafka connector, the Kafka broker) are not in the cache.

    Run ``scripts/setup.sh`` (or ``python scripts/fetch_jars.py``) once to fetch them.
    """


class BrokerError(SparkExtError, RuntimeError):
    """The local Kafka broker could not be started, reached or stopped."""
