"""The storage layer without services: a location URI mapped to each client's form, settings
from a profile, and the file operations on local paths."""

from __future__ import annotations

from pathlib import Path

import pytest

from spark_ext import storage
from spark_ext.config import load_profile
from spark_ext.errors import ConfigError
from spark_ext.storage import Location, StorageSettings

LOCAL = StorageSettings(
    endpoint="http://127.0.0.1:9000", access_key_id="key", secret_access_key="s3cr3t"
)


@pytest.mark.parametrize(
    "uri", ["s3a://bkt/a/b", "s3://bkt/a/b", "s3n://bkt/a/b/", "s3a://bkt//a/b"]
)
def test_s3_uri_forms_parse_to_one_location(uri: str) -> None:
    assert Location.parse(uri) == Location("bkt", "a/b")


def test_local_paths_and_file_uris_parse_to_absolute_paths(tmp_path: Path) -> None:
    assert Location.parse(tmp_path / "t") == Location("", str(tmp_path / "t"))
    assert Location.parse(f"file://{tmp_path}/t") == Location("", str(tmp_path / "t"))
    assert Location.parse("rel/t").path == str(Path("rel/t").resolve())


@pytest.mark.parametrize("uri", ["abfss://c@acct.dfs.core.windows.net/t", "gs://b/t", "s3a:///t"])
def test_unsupported_or_bucketless_uris_are_config_errors(uri: str) -> None:
    with pytest.raises(ConfigError, match="location"):
        Location.parse(uri)


def test_each_client_gets_its_own_uri_form() -> None:
    loc = Location.parse("s3a://bkt/tables/t")
    assert storage.spark_uri(loc) == "s3a://bkt/tables/t"
    assert storage.delta_storage(loc, LOCAL)[0] == "s3://bkt/tables/t"
    assert str(loc.join("_delta_log", "0.json")) == "s3://bkt/tables/t/_delta_log/0.json"
    assert storage.spark_uri("/data/t") == "/data/t"
    assert storage.delta_storage("/data/t", LOCAL) == ("/data/t", {})


def test_delta_rs_options_use_conditional_put_and_the_endpoint() -> None:
    _, options = storage.delta_storage("s3a://bkt/t", LOCAL)
    assert options == {
        "AWS_REGION": "us-east-1",
        "conditional_put": "etag",
        "AWS_ENDPOINT_URL": "http://127.0.0.1:9000",
        "AWS_VIRTUAL_HOSTED_STYLE_REQUEST": "false",
        "AWS_ALLOW_HTTP": "true",
        "AWS_ACCESS_KEY_ID": "key",
        "AWS_SECRET_ACCESS_KEY": "s3cr3t",
    }


def test_spark_gets_hadoop_s3a_settings_with_simple_credentials() -> None:
    conf = storage.spark_conf(LOCAL)
    assert conf["spark.hadoop.fs.s3a.endpoint"] == "http://127.0.0.1:9000"
    assert conf["spark.hadoop.fs.s3a.path.style.access"] == "true"
    assert conf["spark.hadoop.fs.s3a.connection.ssl.enabled"] == "false"
    assert conf["spark.hadoop.fs.s3a.access.key"] == "key"
    assert conf["spark.hadoop.fs.s3a.aws.credentials.provider"].endswith(
        "SimpleAWSCredentialsProvider"
    )


def test_aws_itself_needs_no_endpoint_settings() -> None:
    conf = storage.hadoop_conf(StorageSettings(region="eu-west-1"))
    assert "fs.s3a.endpoint" not in conf
    assert conf["fs.s3a.endpoint.region"] == "eu-west-1"


def test_credentials_come_from_the_environment_when_the_profile_has_none(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "env-key")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "env-secret")
    monkeypatch.setenv("AWS_SESSION_TOKEN", "env-token")
    conf = storage.hadoop_conf(StorageSettings())
    assert conf["fs.s3a.session.token"] == "env-token"
    assert conf["fs.s3a.aws.credentials.provider"].endswith("TemporaryAWSCredentialsProvider")
    assert LOCAL.credentials() == ("key", "s3cr3t", "")


def test_repr_never_shows_the_secret() -> None:
    assert "s3cr3t" not in repr(LOCAL)
    assert "s3cr3t" not in repr(load_profile("s3"))


def test_profiles_take_a_storage_section() -> None:
    assert load_profile("s3").storage.endpoint == "http://127.0.0.1:9000"
    assert load_profile("test").storage == StorageSettings()
    with pytest.raises(ConfigError, match=r"storage\.bucket"):
        load_profile("test", storage={"bucket": "b"})
    with pytest.raises(ConfigError, match=r"storage\.endpoint"):
        load_profile("test", storage={"endpoint": "127.0.0.1:9000"})


def test_local_file_operations(tmp_path: Path) -> None:
    root = Location.parse(tmp_path / "root")
    storage.write_bytes(root.join("a", "x.bin"), b"one")
    storage.write_bytes(root.join("a", "x.bin"), b"two")
    storage.write_bytes(root.join("b.bin"), b"")
    assert storage.read_bytes(root.join("a", "x.bin")) == b"two"
    assert storage.list_prefix(root) == ["a/x.bin", "b.bin"]  # no temporary file left
    assert storage.file_sizes(root) == {"a/x.bin": 3, "b.bin": 0}
    assert storage.exists(root.join("b.bin"))
    storage.delete(root.join("a"))
    assert storage.list_prefix(root) == ["b.bin"]
    storage.delete(root.join("none"))
    with pytest.raises(FileNotFoundError):
        storage.read_bytes(root.join("none"))
    storage.check(root)


def test_sessions_carry_the_s3a_jars_and_the_profiles_hadoop_settings() -> None:
    from spark_ext.session import spark_conf

    conf = spark_conf(load_profile("s3"))
    jars = conf["spark.jars"].split(",")
    assert any("hadoop-aws-3.5.0" in j for j in jars)
    assert any("spark-hadoop-cloud" in j for j in jars)
    assert not any("bundle-" in j for j in jars)
    assert conf["spark.hadoop.fs.s3a.endpoint"] == "http://127.0.0.1:9000"
