"""Kafka client properties (no broker, no Spark): one set of Kafka property names reaches every
client kafka_clients builds, in each client's own names, and the tasks; secrets stay hidden."""

from __future__ import annotations

import pickle
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from spark_ext import kafka_clients
from spark_ext.config import load_profile
from spark_ext.errors import ConfigError

BOOTSTRAP = "broker.example:9096"
SECRET = 'p"w\\d'  # a quote and a backslash: the JAAS value is quoted and escaped
SCRAM = {
    "security.protocol": "SASL_SSL",
    "sasl.mechanism": "SCRAM-SHA-512",
    "sasl.jaas.config": (
        "org.apache.kafka.common.security.scram.ScramLoginModule required "
        'username="etl" password="p\\"w\\\\d";'
    ),
    "ssl.truststore.location": "/certs/ca.pem",
    "ssl.truststore.type": "PEM",
}
KAFKA_PYTHON = {
    "security_protocol": "SASL_SSL",
    "sasl_mechanism": "SCRAM-SHA-512",
    "sasl_plain_username": "etl",
    "sasl_plain_password": SECRET,
    "ssl_cafile": "/certs/ca.pem",
}
LIBRDKAFKA = {
    "security.protocol": "SASL_SSL",
    "sasl.mechanism": "SCRAM-SHA-512",
    "sasl.username": "etl",
    "sasl.password": SECRET,
    "ssl.ca.location": "/certs/ca.pem",
}


@pytest.fixture
def secured(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[dict[str, Any]]]:
    """:data:`SCRAM` configured for :data:`BOOTSTRAP`, kafka-python's and confluent-kafka's
    client classes replaced by recorders of their arguments, no network probe."""
    import confluent_kafka
    import kafka

    built: list[dict[str, Any]] = []

    class Recorder:
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            built.append({"args": args, **kwargs})

        def close(self, *args: Any, **kwargs: Any) -> None:
            pass

        def create_topics(self, topics: Any) -> None:
            pass

    for name in ("KafkaConsumer", "KafkaProducer", "KafkaAdminClient"):
        monkeypatch.setattr(kafka, name, Recorder)
    monkeypatch.setattr(confluent_kafka, "Producer", Recorder)
    monkeypatch.setattr(confluent_kafka, "Consumer", Recorder)
    monkeypatch.setattr(kafka_clients, "check_access", lambda *a, **k: None)
    kafka_clients.configure(BOOTSTRAP, SCRAM)
    yield built
    kafka_clients.configure(BOOTSTRAP, None)


def test_every_client_built_by_kafka_clients_gets_the_mapped_properties(secured):
    from connectors.kafka.producer import ConfluentProducer
    from connectors.kafka.settings import KafkaSinkSettings

    kafka_clients.consumer(BOOTSTRAP, group_id="g")
    kafka_clients.producer(BOOTSTRAP, acks="all")
    with kafka_clients.admin(BOOTSTRAP):
        pass
    kafka_clients.create_topic(BOOTSTRAP, "t")
    ConfluentProducer(KafkaSinkSettings(BOOTSTRAP, "t", "s"), "txn")  # the sinks' data path
    kafka_python, librdkafka = secured[:4], secured[4:]
    assert len(kafka_python) == 4 and len(librdkafka) == 1
    for kwargs in kafka_python:
        assert kwargs["bootstrap_servers"] == BOOTSTRAP
        assert {k: kwargs[k] for k in KAFKA_PYTHON} == KAFKA_PYTHON
    config = librdkafka[0]["args"][0]
    assert {k: config[k] for k in LIBRDKAFKA} == LIBRDKAFKA
    assert config["transactional.id"] == "txn"  # the caller's settings kept beside them
    assert kafka_clients.confluent_config(BOOTSTRAP, {"group.id": "g"})["sasl.username"] == "etl"


def test_another_cluster_gets_none_of_them(secured):
    kafka_clients.consumer("127.0.0.1:9092")
    assert "security_protocol" not in secured[0]
    assert kafka_clients.spark_options("127.0.0.1:9092") == {
        "kafka.bootstrap.servers": "127.0.0.1:9092"
    }


def test_spark_gets_kafka_prefixed_java_properties_with_a_jaas_config(secured):
    options = kafka_clients.spark_options(BOOTSTRAP)
    assert options == {
        "kafka.bootstrap.servers": BOOTSTRAP,
        "kafka.security.protocol": "SASL_SSL",
        "kafka.sasl.mechanism": "SCRAM-SHA-512",
        "kafka.sasl.jaas.config": (
            "org.apache.kafka.common.security.scram.ScramLoginModule required "
            'username="etl" password="p\\"w\\\\d";'
        ),
        "kafka.ssl.truststore.location": "/certs/ca.pem",
        "kafka.ssl.truststore.type": "PEM",
    }


def test_username_and_password_make_the_jaas_config_of_their_mechanism():
    props = kafka_clients.KafkaProperties(
        {
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "PLAIN",
            "sasl.username": "u",
            "sasl.password": "pw",
            "ssl.endpoint.identification.algorithm": "",
        }
    )
    assert props.java()["sasl.jaas.config"] == (
        'org.apache.kafka.common.security.plain.PlainLoginModule required username="u" '
        'password="pw";'
    )
    assert props.kafka_python()["ssl_check_hostname"] is False
    assert props.librdkafka()["ssl.endpoint.identification.algorithm"] == "none"


def test_the_sinks_settings_carry_the_properties_to_the_data_source_and_the_tasks(secured):
    from connectors.kafka.idempotent import SliceWriter
    from connectors.kafka.settings import KafkaSinkSettings

    settings = KafkaSinkSettings(BOOTSTRAP, "out", "sink_1")
    options = settings.as_options()
    assert options["kafka.sasl.password"] == SECRET
    shipped = pickle.dumps(settings)
    writer = pickle.dumps(SliceWriter(settings, 0, None))  # type: ignore[arg-type]
    kafka_clients.configure(BOOTSTRAP, None)  # a fresh Python worker knows nothing

    assert not kafka_clients.properties_of(BOOTSTRAP).secured
    pickle.loads(writer)  # unpickling a task's function configures its worker
    assert kafka_clients.properties_of(BOOTSTRAP).librdkafka() == LIBRDKAFKA
    kafka_clients.configure(BOOTSTRAP, None)
    assert pickle.loads(shipped).access.properties.kafka_python() == KAFKA_PYTHON
    kafka_clients.configure(BOOTSTRAP, None)
    assert KafkaSinkSettings.from_options(options).access.properties.librdkafka() == LIBRDKAFKA
    assert kafka_clients.properties_of(BOOTSTRAP).librdkafka() == LIBRDKAFKA


def test_secrets_are_not_in_reprs(secured):
    from connectors.kafka.settings import KafkaSinkSettings

    shown = [
        repr(kafka_clients.properties_of(BOOTSTRAP)),
        repr(kafka_clients.access(BOOTSTRAP)),
        repr(KafkaSinkSettings(BOOTSTRAP, "out", "sink_1")),
        repr(load_profile("test").kafka),
    ]
    assert all('p"w' not in text and "jaas" not in text for text in shown), shown
    assert "SASL_SSL, SCRAM-SHA-512, user etl" in shown[1]


@pytest.mark.parametrize(
    ("properties", "setting"),
    [
        ({"security.protocol": "TLS"}, "kafka.properties.security.protocol"),
        (
            {"security.protocol": "SASL_SSL", "sasl.username": "u", "sasl.password": "p"},
            "kafka.properties.sasl.mechanism",
        ),
        (
            {"security.protocol": "SASL_SSL", "sasl.mechanism": "PLAIN", "sasl.username": "u"},
            "kafka.properties.sasl.password",
        ),
        (
            {"sasl.jaas.config": "com.example.Login required;", "security.protocol": "SASL_SSL"},
            "kafka.properties.sasl.jaas.config",
        ),
        (
            {"ssl.truststore.location": "/ca.jks", "ssl.truststore.type": "JKS"},
            "kafka.properties.ssl.truststore.type",
        ),
        (
            {"sasl.oauthbearer.token.endpoint.url": "https://idp"},
            "kafka.properties.sasl.oauthbearer.token.endpoint.url",
        ),
    ],
)
def test_a_bad_property_is_a_config_error_naming_it(properties: dict, setting: str) -> None:
    with pytest.raises(ConfigError) as info:
        load_profile("test", kafka={"properties": properties})
    assert info.value.setting == setting
    assert 'p"w' not in str(info.value)


def test_the_profile_section_reads_secrets_from_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "secured.toml"
    path.write_text(
        '[kafka]\nbootstrap_servers = "broker.example:9096"\n'
        '[kafka.properties]\n"security.protocol" = "SASL_SSL"\n'
        '"sasl.mechanism" = "SCRAM-SHA-512"\n"sasl.username" = "etl"\n'
        '"sasl.password" = "${env:KAFKASEC_TEST_PASSWORD}"\n'
    )
    with pytest.raises(ConfigError, match=r"sasl\.password: \$\{env:KAFKASEC_TEST_PASSWORD\}"):
        load_profile(path)
    monkeypatch.setenv("KAFKASEC_TEST_PASSWORD", SECRET)
    profile = load_profile(path)
    assert profile.kafka.client_properties()["sasl.password"] == SECRET
    try:
        assert profile.kafka.configure_clients() == BOOTSTRAP
        assert kafka_clients.properties_of(BOOTSTRAP).librdkafka()["sasl.password"] == SECRET
    finally:
        kafka_clients.configure(BOOTSTRAP, None)


def test_a_derived_profile_keeps_the_kafka_properties(tmp_path: Path) -> None:
    """The harness runs every job of ``check``/``matrix`` from a profile derived from the
    user's: a secured cluster's ``[kafka.properties]`` must survive it."""
    from spark_ext.recovery.profiles import derive_profile

    base = tmp_path / "secured.toml"
    base.write_text(
        '[kafka]\nbootstrap_servers = "broker.example:9096"\n[kafka.properties]\n'
        '"security.protocol" = "SSL"\n"ssl.truststore.location" = "/certs/ca.pem"\n'
    )
    derived = derive_profile(str(base), tmp_path / "derived.toml", bootstrap="other:9096")
    kafka = load_profile(derived).kafka
    assert kafka.bootstrap_servers == "other:9096"
    assert kafka.client_properties().librdkafka() == {
        "security.protocol": "SSL",
        "ssl.ca.location": "/certs/ca.pem",
    }


def test_kafka_pythons_arguments_hide_the_secrets_when_logged(secured):
    """kafka-python's admin client logs its whole configuration at DEBUG."""
    arguments = kafka_clients.properties_of(BOOTSTRAP).kafka_python()
    assert arguments["sasl_plain_password"] == SECRET
    assert 'p"w' not in repr(arguments) and 'p"w' not in str(arguments)


@pytest.mark.parametrize(
    ("given", "setting"),
    [
        ({"ssl.truststore.location": "/nonexistent/ca.pem"}, "ssl.truststore.location"),
        ({"ssl.keystore.location": "/etc/hostname"}, "ssl.keystore.location"),  # no key in it
    ],
)
def test_a_certificate_file_the_client_cannot_read_is_a_config_error_naming_it(
    given: dict[str, str], setting: str
) -> None:
    bootstrap = "127.0.0.1:1"  # never reached: the files are read first
    kafka_clients.configure(bootstrap, {"security.protocol": "SSL", **given})
    try:
        with pytest.raises(ConfigError) as info:
            kafka_clients.check_access(bootstrap)
    finally:
        kafka_clients.configure(bootstrap, None)
    assert info.value.setting == f"kafka.properties.{setting}"
    assert str(info.value).startswith(f"kafka.properties.{setting}: {given[setting]}: ")
