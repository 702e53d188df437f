"""Exception classes of spark_ext: one class per failure kind, so callers catch, never match strings."""

from __future__ import annotations

__all__ = ["BrokerError", "ConfigError", "JarsNotFetched", "SparkExtError"]


class SparkExtError(Exception):
    """Base class of every error spark_ext raises on purpose."""


class ConfigError(SparkExtError, ValueError):
    """A setting is missing, unknown or wrong; raised at start-up. ``setting`` names it."""

    def __init__(self, setting: str, message: str) -> None:
        self.setting = setting
        super().__init__(f"{setting}: {message}")


class JarsNotFetched(SparkExtError, FileNotFoundError):
    """The JVM jars (Delta, Spark's Kafka connector, the broker) are not fetched yet
    (``scripts/setup.sh`` or ``python scripts/fetch_jars.py`` fetches them)."""


class BrokerError(SparkExtError, RuntimeError):
    """The local Kafka broker could not be started, reached or stopped."""
