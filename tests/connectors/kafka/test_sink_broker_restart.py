"""The Kafka broker killed (by its PID) and restarted on the same data directory mid-stream.

Uses a private broker on free ports (the shared one is never stopped). The two-phase
Kafka -> Kafka job must resume -- by itself, or when restarted if the outage failed its
query -- and the committed output must hold every input record exactly once.
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor

import pytest
from kafka.errors import KafkaError

from connectors import kafka
from connectors.demo_events import produce_events
from connectors.kafka.local_broker import BrokerConfig, LocalKafkaBroker
from connectors.kafka.progress import SinkProgress
from jobs.exactly_once_kafka import forward
from spark_ext.jobrun import run_job
from tests.conftest import free_ports

pytestmark = [pytest.mark.integration, pytest.mark.crash]

EVENTS = 360


@pytest.fixture
def private_broker(tmp_path):
    port, controller = free_ports(2)
    broker = LocalKafkaBroker(
        BrokerConfig(
            data_dir=tmp_path / "kafka", port=port, controller_port=controller, heap="512m"
        )
    )
    broker.start()
    yield broker
    broker.stop(hard=True)


def recorded_batch(bootstrap: str, topic: str, sink_id: str) -> int:
    try:
        got = SinkProgress(bootstrap, topic, sink_id).read()
    except KafkaError:
        return -1
    return got.batch_id if got is not None and got.batch_id is not None else -1


def test_two_phase_kafka_sink_resumes_after_the_broker_restarts(spark, private_broker, tmp_path):
    bootstrap = private_broker.config.bootstrap_servers
    kafka.create_topic(bootstrap, "in", 3)
    kafka.create_topic(bootstrap, "out", 3)
    produce_events(bootstrap, "in", EVENTS)
    rows = forward(kafka.read_batch(spark, bootstrap, "in")).collect()
    expected = sorted((r.key.encode(), r.value.encode()) for r in rows)
    args = [
        "--profile", "test", "--bootstrap", bootstrap, "--topic", "in", "--out", "out",
        "--mode", "two_phase", "--sink-id", "eo_broker", "--checkpoint", str(tmp_path / "chk"),
        "--max-offsets-per-trigger", "30",
        # A stalled client call is given up after about this long (ClientStalledError): 35 s
        # instead of 130 s with the default 120 s (the suite's budget). The outage is ~10 s.
        "--delivery-timeout-ms", "20000",
    ]  # fmt: skip

    with ThreadPoolExecutor(1) as pool:
        first = pool.submit(run_job, "jobs.exactly_once_kafka", args, timeout_s=600)
        deadline = time.monotonic() + 300
        while recorded_batch(bootstrap, "out", "eo_broker") < 1:  # mid-stream: 12 batches
            assert time.monotonic() < deadline, "the job never committed batch 1"
            assert not first.done(), first.result().output_tail
            time.sleep(0.5)
        private_broker.stop(hard=True)  # SIGKILL by PID
        private_broker.start()  # same data directory
        run = first.result()
    if not run.ok:  # the outage failed the query: restart it from its checkpoint
        run = run_job("jobs.exactly_once_kafka", args, timeout_s=600)
    assert run.ok, run.output_tail

    got = sorted((k, v) for _, _, k, v in kafka.consume_all(bootstrap, "out", read_committed=True))
    assert got == expected
