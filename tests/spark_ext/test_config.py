"""Configuration profiles: typed, validated at load time, errors name the setting."""

from __future__ import annotations

from pathlib import Path

import pytest

from spark_ext.config import STATE_STORES, load_profile
from spark_ext.errors import ConfigError, JarsNotFetched


@pytest.mark.parametrize("name", ["local", "test", "cluster"])
def test_shipped_profiles_load(name: str) -> None:
    profile = load_profile(name)
    assert profile.name == name
    assert profile.spark.state_store in STATE_STORES


def test_local_profiles_use_two_shuffle_partitions() -> None:
    assert load_profile("local").spark.shuffle_partitions == 2
    assert load_profile("test").spark.shuffle_partitions == 2


@pytest.mark.parametrize(
    ("overrides", "setting"),
    [
        ({"spark": {"shuffle_partitions": 0}}, "spark.shuffle_partitions"),
        ({"spark": {"shuffle_partitions": "2"}}, "spark.shuffle_partitions"),
        ({"spark": {"ui_enabled": "no"}}, "spark.ui_enabled"),
        ({"spark": {"state_store": "leveldb"}}, "spark.state_store"),
        ({"spark": {"shufle_partitions": 2}}, "spark.shufle_partitions"),
        ({"spark": {"conf": {"sql.shuffle.partitions": "2"}}}, "spark.conf.sql.shuffle.partitions"),
        ({"kafka": {"bootstrap_servers": "localhost"}}, "kafka.bootstrap_servers"),
        ({"paths": {"data_root": 3}}, "paths.data_root"),
        ({"sparkk": {}}, "sparkk"),
    ],
)
def test_bad_setting_fails_at_load_naming_the_setting(overrides: dict, setting: str) -> None:
    with pytest.raises(ConfigError) as info:
        load_profile("test", **overrides)
    assert info.value.setting == setting
    assert str(info.value).startswith(setting)


def test_unknown_profile_lists_the_known_ones() -> None:
    with pytest.raises(ConfigError, match=r"known: .*local"):
        load_profile("nope")


def test_profile_from_a_path(tmp_path: Path) -> None:
    path = tmp_path / "mine.toml"
    path.write_text('[spark]\nmaster = "local[1]"\n[spark.conf]\n"spark.sql.ansi.enabled" = true\n')
    profile = load_profile(path)
    assert profile.spark.master == "local[1]"
    assert profile.spark.conf == {"spark.sql.ansi.enabled": "true"}


def test_invalid_toml_is_a_config_error(tmp_path: Path) -> None:
    path = tmp_path / "broken.toml"
    path.write_text("[spark\n")
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_profile(path)


def test_missing_jar_cache_is_a_typed_error(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from spark_ext import jvm

    monkeypatch.setenv("SPARK_EXT_CACHE", str(tmp_path))
    with pytest.raises(JarsNotFetched, match=r"scripts/setup\.sh"):
        jvm.spark_jars()


def test_session_conf_carries_delta_kafka_jars_and_fast_local_settings() -> None:
    from spark_ext.session import spark_conf

    conf = spark_conf(load_profile("test"))
    jars = conf["spark.jars"].split(",")
    assert any("delta-spark_4.2_2.13" in j for j in jars)
    assert any("spark-sql-kafka-0-10_2.13-4.2.0" in j for j in jars)
    assert conf["spark.sql.shuffle.partitions"] == "2"
    assert conf["spark.ui.enabled"] == "false"
    assert "RocksDBStateStoreProvider" in conf["spark.sql.streaming.stateStore.providerClass"]


def test_the_driver_starts_from_the_class_archive_once_it_is_made(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from spark_ext import jvm
    from spark_ext.session import spark_conf

    def driver_options(**spark: object) -> str:
        return spark_conf(load_profile("test", spark=spark))["spark.driver.extraJavaOptions"]

    real = jvm.class_archive
    monkeypatch.setattr(jvm, "class_archive", lambda: tmp_path / real().name)
    assert "SharedArchiveFile" not in driver_options()  # none made: the jars
    (tmp_path / real().name).write_bytes(b"archive")
    assert f"-XX:SharedArchiveFile={tmp_path / real().name}" in driver_options()
    assert "SharedArchiveFile" not in driver_options(class_archive=False)
    assert driver_options().startswith(load_profile("test").spark.java_options)
    executors = spark_conf(load_profile("test"))["spark.executor.extraJavaOptions"]
    assert "SharedArchiveFile" not in executors  # a worker's JVM has another classpath


def test_a_fault_asked_of_the_job_reaches_a_clusters_executors(monkeypatch) -> None:
    """A cluster's executors are started by its workers, not by the job: without
    ``spark.executorEnv.*`` a task's fault point never sees the fault (measured: the
    speculation cells' stragglers never slept on the cluster)."""
    from spark_ext.crash import FAULT_ENV, FAULT_LOG_ENV, JOB_SESSION_ENV, TRACE_ENV
    from spark_ext.session import spark_conf

    monkeypatch.setenv(FAULT_ENV, "delta2pc.1.staged@1#0:sleep=5")
    monkeypatch.setenv(FAULT_LOG_ENV, "/tmp/faults.jsonl")
    monkeypatch.setenv(TRACE_ENV, "1")
    monkeypatch.setenv(JOB_SESSION_ENV, "1")
    conf = spark_conf(load_profile("cluster"))
    assert conf[f"spark.executorEnv.{FAULT_ENV}"] == "delta2pc.1.staged@1#0:sleep=5"
    assert conf[f"spark.executorEnv.{FAULT_LOG_ENV}"] == "/tmp/faults.jsonl"
    assert conf[f"spark.executorEnv.{TRACE_ENV}"] == "1"
    # An executor is no part of the job's process session: a kill there must not aim at it.
    assert f"spark.executorEnv.{JOB_SESSION_ENV}" not in conf
    monkeypatch.delenv(FAULT_ENV)
    monkeypatch.delenv(FAULT_LOG_ENV)
    monkeypatch.delenv(TRACE_ENV)
    assert not [k for k in spark_conf(load_profile("cluster")) if "SPARK_EXT" in k]


@pytest.mark.integration
def test_a_typo_under_spark_conf_fails_at_start_naming_it_with_the_known_key(spark) -> None:
    from spark_ext.session import build_session

    profile = load_profile("test", spark={"conf": {"spark.executor.memroy": "1g"}})
    with pytest.raises(ConfigError) as info:
        build_session(profile)
    assert info.value.setting == "spark.conf.spark.executor.memroy"
    assert "spark.executor.memory" in str(info.value)


@pytest.mark.integration
def test_every_shipped_profile_and_open_namespace_passes_the_spark_conf_check(spark) -> None:
    from spark_ext.config import CONF_DIR
    from spark_ext.session import check_spark_conf

    for path in sorted(CONF_DIR.glob("*.toml")):
        check_spark_conf(spark, load_profile(path).spark.conf)
    check_spark_conf(
        spark,
        {
            "spark.executor.memory": "1g",
            "spark.sql.streaming.stateStore.rocksdb.compactOnCommit": "true",
            "spark.hadoop.fs.s3a.endpoint": "http://minio:9000",
            "spark.databricks.delta.retentionDurationCheck.enabled": "false",
        },
    )
