"""Exception classes of spark_ext: one class per failure kind, so callers catch, never match strings."""

from __future__ import annotations

from typing import Self

__all__ = [
    "BrokerError",
    "BrokerUnreachableError",
    "CheckpointMismatchError",
    "ConfigError",
    "JarsNotFetched",
    "SparkExtError",
]


class SparkExtError(Exception):
    """Base class of every error spark_ext raises on purpose. ``fix`` (may be empty) says what
    to do about it; a job prints both on one line (docs/design.md, "A job that talks")."""

    fix: str = ""

    def with_fix(self, fix: str) -> Self:
        """This error, with ``fix`` as what to do about it."""
        self.fix = fix
        return self


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


class BrokerUnreachableError(BrokerError):
    """No Kafka broker of ``bootstrap`` accepted a connection within ``waited_s`` seconds."""

    fix = "start the broker (python -m connectors.kafka.local_broker start) or pass --bootstrap"

    def __init__(self, bootstrap: str, waited_s: float) -> None:
        self.bootstrap, self.waited_s = bootstrap, waited_s
        super().__init__(f"no Kafka broker answers at {bootstrap} (waited {waited_s:g} s)")


class CheckpointMismatchError(ConfigError):
    """A checkpoint was written by a query reading other topics than this one."""

    def __init__(self, checkpoint: str, recorded: list[str], topics: list[str]) -> None:
        self.checkpoint, self.recorded, self.topics = checkpoint, recorded, topics
        super().__init__(
            "checkpoint",
            f"{checkpoint} was written by a query reading {', '.join(recorded) or 'no topic'}; "
            f"this job reads {', '.join(topics)}",
        )
        self.fix = "pass another --checkpoint (or --out), or the --topic it was written for"
