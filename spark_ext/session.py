"""Build a SparkSession from a configuration profile, with Delta and Kafka ready to use.

Example
-------
>>> from spark_ext.session import build_session
>>> spark = build_session("local")          # doctest: +SKIP
>>> spark.range(3).write.format("delta").save("/tmp/t")  # doctest: +SKIP
"""

from __future__ import annotations

import logging
import os
import sys

from pyspark.sql import SparkSession

from spark_ext import jvm
from spark_ext.config import STATE_STORES, Profile, load_profile

__all__ = ["build_session", "prepare_environment", "spark_conf"]

log = logging.getLogger(__name__)


def spark_conf(profile: Profile) -> dict[str, str]:
    """Every Spark setting the profile implies, as the strings Spark takes."""
    s = profile.spark
    conf = {
        "spark.master": s.master,
        "spark.app.name": s.app_name,
        "spark.jars": ",".join(str(j) for j in jvm.spark_jars()),
        "spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
        "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
        "spark.sql.shuffle.partitions": str(s.shuffle_partitions),
        "spark.ui.enabled": "true" if s.ui_enabled else "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.driver.memory": s.driver_memory,
        "spark.driver.extraJavaOptions": s.java_options,
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
    conf.update(s.conf)
    return conf


def prepare_environment() -> None:
    """Environment a local Spark needs on these machines (loopback, the venv's Python)."""
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    # py4j logs every gateway call at INFO, which drowns a job's own log lines.
    logging.getLogger("py4j").setLevel(logging.WARNING)


def build_session(profile: Profile | str = "local", **overrides: object) -> SparkSession:
    """Build (or return the running) SparkSession for ``profile``.

    Parameters
    ----------
    profile
        A :class:`~spark_ext.config.Profile` or the name of one in ``conf/``.
    overrides
        Section overrides passed to :func:`~spark_ext.config.load_profile` when ``profile``
        is a name, e.g. ``spark={"state_store": "hdfs"}``.
    """
    if isinstance(profile, str):
        profile = load_profile(profile, **overrides)
    prepare_environment()
    builder = SparkSession.builder
    for key, value in spark_conf(profile).items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    log.info(
        "SparkSession %s on %s (profile %s)", spark.version, profile.spark.master, profile.name
    )
    return spark
