"""The project's JVM jars for Spark and the Kafka broker, read from the cache
``scripts/fetch_jars.py`` fills once (so no query start downloads anything)."""

from __future__ import annotations

import hashlib
import os
import shutil
from pathlib import Path

from spark_ext.errors import JarsNotFetched

__all__ = [
    "COMPLETE_MARKER",
    "KAFKA_BROKER_SET",
    "SPARK_JARS_SET",
    "cache_root",
    "class_archive",
    "class_archive_options",
    "java",
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


def java() -> str:
    """The ``java`` of ``$JAVA_HOME``, else the one on ``PATH``."""
    home = os.environ.get("JAVA_HOME")
    return str(Path(home) / "bin" / "java") if home else "java"


def class_archive() -> Path:
    """Where ``scripts/class_archive.py`` keeps the driver JVM's class-data archive for this
    pyspark and this Java (docs/design.md, "JVM start-up")."""
    import pyspark

    real = os.path.realpath(shutil.which(java()) or java())
    stamp = os.stat(real).st_mtime_ns if os.path.exists(real) else 0
    key = f"{pyspark.__version__}|{real}|{stamp}|{SPARK_JARS_SET}"
    return cache_root() / "cds" / f"driver-{hashlib.sha256(key.encode()).hexdigest()[:16]}.jsa"


def class_archive_options() -> str:
    """Driver JVM options that start it from :func:`class_archive` ("" while there is none);
    the JVM falls back to the jars, silently, if the archive does not match."""
    archive = class_archive()
    if not archive.is_file():
        return ""
    return f"-XX:SharedArchiveFile={archive} -Xshare:auto -Xlog:cds=off,cds+dynamic=off"
