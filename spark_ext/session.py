"""Build a SparkSession from a configuration profile, with Delta and Kafka ready to use
(``build_session("local")``; README, "Python API")."""

from __future__ import annotations

import difflib
import logging
import os
import sys
from collections.abc import Iterable
from typing import Any

from pyspark.sql import SparkSession

from spark_ext import jvm, storage
from spark_ext.config import STATE_STORES, Profile, load_profile
from spark_ext.crash import executor_environment
from spark_ext.errors import ConfigError

__all__ = [
    "OPEN_NAMESPACES",
    "build_session",
    "check_spark_conf",
    "prepare_environment",
    "spark_conf",
]

#: Prefixes of settings read by prefix, not registered one by one (or whose classes may not be
#: loaded yet), and spark_ext's own: a key under one of them is accepted as it is.
OPEN_NAMESPACES = (
    "spark.spark_ext.",
    "spark.hadoop.",
    "spark.executorEnv.",
    "spark.sql.catalog.",
    "spark.sql.streaming.stateStore.rocksdb.",
    "spark.databricks.delta.",
    "spark.delta.",
    "spark.kafka.",
    "spark.sql.kafka.",
    "spark.yarn.appMasterEnv.",
    "spark.kubernetes.",
    "spark.metrics.conf.",
)

log = logging.getLogger(__name__)


def spark_conf(profile: Profile) -> dict[str, str]:
    """Every Spark setting the profile implies, as the strings Spark takes."""
    s = profile.spark
    conf = {
        "spark.master": s.master,
        "spark.app.name": s.app_name,
        "spark.jars": ",".join(str(j) for j in [*jvm.spark_jars(), *storage.s3_jars()]),
        "spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
        "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
        "spark.sql.shuffle.partitions": str(s.shuffle_partitions),
        "spark.ui.enabled": "true" if s.ui_enabled else "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.driver.memory": s.driver_memory,
        "spark.driver.extraJavaOptions": " ".join(
            filter(None, [s.java_options, jvm.class_archive_options() if s.class_archive else ""])
        ),
        "spark.executor.extraJavaOptions": s.java_options,
        "spark.driver.host": "127.0.0.1",
        "spark.driver.bindAddress": "127.0.0.1",
        "spark.sql.session.timeZone": "UTC",
        "spark.sql.execution.arrow.pyspark.enabled": "true",
        "spark.sql.streaming.stopTimeout": "30s",
        "spark.databricks.delta.snapshotPartitions": "2",
        "spark.databricks.delta.properties.defaults.checkpointInterval": "20",
    }
    conf.update(STATE_STORES[s.state_store])
    conf.update(storage.spark_conf(profile.storage))
    # A fault asked of this job reaches executors a cluster's workers start, too.
    conf.update({f"spark.executorEnv.{k}": v for k, v in executor_environment().items()})
    conf.update(s.conf)
    return conf


def prepare_environment() -> None:
    """Environment a local Spark needs on these machines (loopback, the venv's Python)."""
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    # py4j logs every gateway call at INFO, which drowns a job's own log lines.
    logging.getLogger("py4j").setLevel(logging.WARNING)


def check_spark_conf(spark: SparkSession, keys: Iterable[str]) -> None:
    """:class:`~spark_ext.errors.ConfigError` (with the closest known keys) for a key neither
    registered in the JVM nor under :data:`OPEN_NAMESPACES` (a typo: ``spark.executor.memroy``)."""
    jvm: Any = spark._jvm
    entries = jvm.org.apache.spark.internal.config.ConfigEntry
    unknown = [
        k for k in keys if not k.startswith(OPEN_NAMESPACES) and entries.findEntry(k) is None
    ]
    if not unknown:
        return
    key = sorted(unknown)[0]
    known = sorted(str(e.key()) for e in entries.listAllEntries().toArray())
    near = difflib.get_close_matches(key, known, n=3, cutoff=0.8)
    hint = f"; did you mean {' or '.join(near)}?" if near else ""
    raise ConfigError(f"spark.conf.{key}", f"Spark has no such setting{hint}")


def build_session(profile: Profile | str = "local", **overrides: object) -> SparkSession:
    """Build (or return the running) SparkSession for ``profile`` (a name: loaded with
    ``overrides``, e.g. ``spark={"state_store": "hdfs"}``); :func:`check_spark_conf` once the
    JVM is up."""
    if isinstance(profile, str):
        profile = load_profile(profile, **overrides)
    prepare_environment()
    builder = SparkSession.builder
    for key, value in spark_conf(profile).items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    check_spark_conf(spark, profile.spark.conf)
    spark.sparkContext.setLogLevel("WARN")
    log.info(
        "SparkSession %s on %s (profile %s)", spark.version, profile.spark.master, profile.name
    )
    return spark
