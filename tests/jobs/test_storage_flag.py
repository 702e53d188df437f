"""``--storage s3`` / ``SPARK_EXT_STORAGE=s3`` (docs/design.md, "Object storage", jobs): the
sections it takes from conf/s3.toml, the locations it makes, and what the harness derives from
an ``s3a://`` root (no Spark, no store needed)."""

from __future__ import annotations

from pathlib import Path

import pytest

from jobs import cli, registry
from jobs.startup import (
    STORAGE_ENV,
    JobLocation,
    default_storage,
    job_parser,
    location,
    storage_overrides,
    under,
)
from spark_ext.config import load_profile
from spark_ext.errors import ConfigError
from spark_ext.recovery import HarnessContext


def test_storage_s3_takes_the_s3_profiles_paths_and_store_over_a_profile_without_one() -> None:
    sections = storage_overrides("s3")
    profile = load_profile("test", **sections)
    assert profile.paths.data_root_uri() == "s3a://spark-ext/var/data"
    assert profile.storage.endpoint == "http://127.0.0.1:9000"
    assert profile.spark.conf == load_profile("test").spark.conf  # the rest is --profile's
    assert storage_overrides("local") == {}
    assert "://" not in load_profile("local").paths.data_root_uri()  # the demo needs no S3


def test_storage_s3_keeps_the_store_of_a_profile_that_names_its_own(tmp_path: Path) -> None:
    """A cluster's profile (scripts/cluster.py --isolated --store) names a store its executors
    reach; conf/s3.toml's 127.0.0.1 is the driver's own loopback, not theirs."""
    own = tmp_path / "cluster.toml"
    own.write_text('[storage]\nendpoint = "http://10.231.0.2:9000"\naccess_key_id = "k"\n')
    profile = load_profile(own, **storage_overrides("s3", str(own)))
    assert profile.storage.endpoint == "http://10.231.0.2:9000"
    assert profile.paths.data_root_uri() == "s3a://spark-ext/var/data"  # [paths] still taken
    plain = load_profile("test", **storage_overrides("s3", "test"))
    assert plain.storage.endpoint == "http://127.0.0.1:9000"


def test_storage_defaults_to_the_environment_and_refuses_a_value_it_does_not_know(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv(STORAGE_ENV, raising=False)
    assert default_storage() == "local"
    monkeypatch.setenv(STORAGE_ENV, "s3")
    assert default_storage() == "s3"
    monkeypatch.setenv(STORAGE_ENV, "gcs")
    with pytest.raises(ConfigError, match=STORAGE_ENV):
        default_storage()


def test_location_flags_name_what_spark_reads(tmp_path: Path) -> None:
    args = job_parser("x", "t").parse_args(["--out", "s3://bkt/a/", "--storage", "s3"])
    assert args.out == "s3a://bkt/a" and isinstance(args.out, JobLocation)
    assert under(args.out, "events") == "s3a://bkt/a/events"
    assert location(str(tmp_path / "x")) == str(tmp_path / "x")
    with pytest.raises(ConfigError, match="scheme 'gs'"):
        location("gs://bkt/a")


def test_a_data_root_uri_the_storage_layer_cannot_reach_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match=r"paths\.data_root"):
        load_profile("test", paths={"data_root": "hdfs://nn/data"})


def test_the_harness_runs_jobs_with_storage_s3_when_their_outputs_are_on_s3(
    tmp_path: Path,
) -> None:
    case = registry.get("exactly_once_delta")
    s3 = HarnessContext(tmp_path, "b:1", "test", "tag", out_root="s3a://spark-ext/r/eo")
    args = case.job_args(s3, s3.slot("clean"))
    assert args[args.index("--table") + 1] == "s3a://spark-ext/r/eo/clean/events"
    assert args[args.index("--checkpoint") + 1] == "s3a://spark-ext/r/eo/clean/_chk"
    assert args[args.index("--storage") + 1] == "s3"
    local = HarnessContext(tmp_path, "b:1", "test", "tag")
    assert "--storage" not in case.job_args(local, local.slot("clean"))
    assert local.slot("clean").out == str(tmp_path / "clean")


def test_matrix_check_and_campaign_take_the_storage_flag() -> None:
    parser = cli.build_parser()
    for command in ("check", "matrix", "campaign"):
        assert parser.parse_args([command, "--storage", "s3"]).storage == "s3"


def test_the_matrix_on_s3_runs_under_a_root_of_its_workdir_alone(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr("spark_ext.storage.check", lambda *a, **k: None)
    one, same = (cli._out_root("s3", tmp_path / "a" / "work")[0] for _ in range(2))
    other, settings = cli._out_root("s3", tmp_path / "b" / "work")
    assert one == same != other
    assert one.startswith("s3a://spark-ext/var/data/recovery/work-")
    assert settings is not None and settings.endpoint == "http://127.0.0.1:9000"
    assert cli._out_root("local", tmp_path) == ("", None)
