"""The project's JVM jars for Spark and the Kafka broker, read from the cache
``scripts/fetch_jars.py`` fills once (so no query start downloads anything)."""

from __future__ import annotations

import os
from pathlib import Path

from spark_ext.errors import JarsNotFetched

__all__ = [
    "COMPLETE_MARKER",
    "KAFKA_BROKER_SET",
    "SPARK_JARS_SET",
    "cache_root",
    "kafka_broker_classpath",
    "kafka_broker_libs_dir",
    "spark_jars",
    "spark_jars_dir",
]

#: Bumped whenever a pom in ``scripts/jvm`` changes, so a stale cache is never used.
SPARK_JARS_SET = "spark-4.2.0-delta-4.4.0-kafka-0-10"
KAFKA_BROKER_SET = "kafka-broker-4.1.1"
COMPLETE_MARKER = ".complete"


def cache_root() -> Path:
    """Every cached download: ``$SPARK_EXT_CACHE`` or ``~/.cache/spark_ext`` (one per machine)."""
    env = os.environ.get("SPARK_EXT_CACHE")
    return Path(env) if env else Path.home() / ".cache" / "spark_ext"


def spark_jars_dir() -> Path:
    """Folder of the jars Spark loads through ``spark.jars``."""
    return cache_root() / "jars" / SPARK_JARS_SET


def kafka_broker_libs_dir() -> Path:
    """Folder of the Kafka broker's runtime classpath."""
    return cache_root() / "jars" / KAFKA_BROKER_SET


def _complete_jars(folder: Path) -> list[Path]:
    if not (folder / COMPLETE_MARKER).exists():
        raise JarsNotFetched(
            f"no complete jar set in {folder}; run scripts/setup.sh (or python scripts/fetch_jars.py)"
        )
    return sorted(folder.glob("*.jar"))


def spark_jars() -> list[Path]:
    """The jars to put on ``spark.jars`` (Delta, Kafka connector and what they need)."""
    return _complete_jars(spark_jars_dir())


def kafka_broker_classpath() -> list[Path]:
    """The Kafka broker's classpath."""
    return _complete_jars(kafka_broker_libs_dir())
