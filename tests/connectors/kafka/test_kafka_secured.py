"""Kafka over secured listeners (a private broker: SASL_PLAINTEXT/SCRAM-SHA-512, SSL, and SSL
requiring a client certificate, with test certificates): the exactly-once Kafka path end to end
over SCRAM and over mutual TLS, the Delta job's query with its Kafka source, wrong credentials
and a missing client certificate as typed errors at start (a job, from its profile's ``[kafka]``
section); heavy: the jobs themselves from their profiles."""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Iterator

import pytest

from connectors import kafka
from connectors.demo_events import produce_events
from connectors.sinks import Trigger, exactly_once_to_kafka
from jobs.exactly_once_kafka import forward
from spark_ext import kafka_clients
from spark_ext.jobrun import run_job
from tests.conftest import await_done
from tests.connectors.conftest import EVENTS, output_records
from tests.connectors.kafka.secured_kafka import PASSWORD, PASSWORD_ENV, SecuredKafka, secured_kafka

pytestmark = pytest.mark.integration

ONCE = Trigger(available_now=True)

#: Wrong credentials must be named within this many seconds of the first client (measured:
#: about 0.5 s; kafka-python alone retries for 30 s, Spark's source for minutes).
AUTH_ERROR_S = 5.0


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecuredKafka]:
    with secured_kafka(tmp_path_factory.mktemp("secured-kafka")) as broker:
        yield broker


@pytest.fixture(scope="module")
def secured_events(secured: SecuredKafka) -> str:
    """A 3-partition topic of demo events, created and produced over the SCRAM listener."""
    name = f"secured-events-{uuid.uuid4().hex[:6]}"
    kafka.create_topic(secured.scram, name, partitions=3)
    produce_events(secured.scram, name, EVENTS, malformed_every=30)
    return name


@pytest.mark.parametrize("listener", ["scram", "mtls"])
def test_exactly_once_kafka_end_to_end_over_a_secured_listener(
    spark, secured, secured_events, tmp_path, listener
):
    bootstrap = getattr(secured, listener)  # SCRAM, or TLS with the client's certificate
    out = f"secured-out-{uuid.uuid4().hex[:6]}"
    kafka.create_topic(bootstrap, out, partitions=3)
    df = forward(kafka.read_stream(spark, bootstrap, secured_events))  # one batch: cheap
    query = exactly_once_to_kafka(
        df, out, bootstrap=bootstrap, sink_id=f"{listener}_eo", checkpoint=tmp_path, trigger=ONCE
    )
    await_done(query, 300)
    assert query.exception() is None
    rows = forward(kafka.read_batch(spark, secured.ssl, secured_events)).collect()  # over TLS
    expected = sorted((r.key.encode() if r.key else None, r.value.encode()) for r in rows)
    assert len(expected) == EVENTS
    assert output_records(bootstrap, out) == expected
    assert output_records(secured.ssl, out) == expected


def test_a_client_without_a_certificate_is_refused_at_start_naming_the_listener(
    spark, secured, secured_events
):
    kafka_clients.configure(secured.mtls, secured.ssl_properties())  # trusts it, no certificate
    try:
        started = time.monotonic()
        with pytest.raises(kafka_clients.KafkaTlsError) as info:
            kafka.read_stream(spark, secured.mtls, secured_events)  # before Spark sees the options
        took = time.monotonic() - started
    finally:
        kafka_clients.configure(secured.mtls, secured.mtls_properties())
    message = str(info.value)
    assert message.startswith(f"Kafka {secured.mtls} (SSL): "), message
    assert "client certificate" in message and "\n" not in message
    assert "ssl.keystore.location" in info.value.fix
    assert took < AUTH_ERROR_S, took
    print(f"no client certificate: refused in {took:.2f} s")


def test_the_delta_jobs_query_reads_its_kafka_source_over_tls(
    spark, secured, secured_events, tmp_path
):
    from deltalake import DeltaTable

    from jobs.exactly_once_delta import events_stream, start

    events = events_stream(spark, secured.ssl, secured_events, max_offsets_per_trigger=None)
    query = start(events, tmp_path / "events", tmp_path / "checkpoint", "secured_delta")
    await_done(query, 300)
    assert query.exception() is None
    table = DeltaTable(str(tmp_path / "events")).to_pyarrow_table()
    assert table.num_rows == EVENTS
    assert set(table.column("topic").to_pylist()) == {secured_events}


@pytest.mark.heavy
@pytest.mark.parametrize(
    ("job", "listener"),
    [
        ("jobs.exactly_once_delta", "ssl"),
        ("jobs.exactly_once_kafka", "scram"),
        ("jobs.exactly_once_kafka", "mtls"),
    ],
)
def test_a_job_runs_on_a_secured_listener_from_its_profile(
    secured, secured_events, tmp_path, job_env, job, listener
):
    profile = secured.profile(tmp_path, listener)
    args = ["--profile", str(profile), "--topic", secured_events, "--sink-id", "secured_job",
            "--checkpoint", str(tmp_path / "checkpoint")]  # fmt: skip
    out = f"secured-job-{uuid.uuid4().hex[:6]}"
    args += ["--table", str(tmp_path / "events")] if listener == "ssl" else ["--out", out]
    run = run_job(job, args, env={**job_env, PASSWORD_ENV: PASSWORD}, timeout_s=600)
    assert run.returncode == 0, run.output_tail
    if listener == "ssl":
        assert f"events table {tmp_path / 'events'}: {EVENTS} rows" in run.output_tail
    else:
        assert len(output_records(secured.ssl, out)) == EVENTS


def test_wrong_credentials_are_a_typed_error_at_start_naming_the_listener(
    spark, secured, secured_events, tmp_path, job_env
):
    # in process: another address of the SCRAM listener, with a wrong password
    wrong = secured.scram.replace("127.0.0.1", "localhost")
    kafka_clients.configure(wrong, secured.scram_properties(password="not-" + PASSWORD))
    try:
        started = time.monotonic()
        with pytest.raises(kafka_clients.KafkaAuthenticationError) as info:
            kafka.read_stream(spark, wrong, secured_events)  # before Spark sees the options
        took = time.monotonic() - started
    finally:
        kafka_clients.configure(wrong, None)
    message = str(info.value)
    assert message.startswith(f"Kafka {wrong} (SASL_PLAINTEXT, SCRAM-SHA-512, user spark-ext) ")
    assert "\n" not in message and PASSWORD not in message
    assert took < AUTH_ERROR_S, took

    # a job, from its profile: the error ends the run at start, before any JVM
    profile = secured.profile(tmp_path, "scram")
    env = {**job_env, PASSWORD_ENV: "not-" + PASSWORD}
    run = run_job(
        "jobs.exactly_once_kafka",
        ["--profile", str(profile), "--topic", secured_events, "--out", "never-written",
         "--checkpoint", str(tmp_path / "checkpoint"), "--sink-id", "secured_wrong"],
        env=env,
        timeout_s=120,
    )  # fmt: skip
    line = f"KafkaAuthenticationError: Kafka {secured.scram} (SASL_PLAINTEXT, SCRAM-SHA-512"
    assert run.returncode != 0 and line in run.output_tail, run.output_tail
    assert "not-" + PASSWORD not in run.output_tail
    assert not (tmp_path / "checkpoint").exists()
    print(f"wrong credentials: {took:.2f} s in process, job ended after {run.seconds:.1f} s")
    assert os.environ.get(PASSWORD_ENV) is None  # the test's own environment untouched
