"""The harness's own broker (never the shared one): paused, resumed, killed and restarted,
and stopped without waiting on a zombie.

Pausing and resuming serve only the broker-fault cells of the fault matrix, which are heavy
(``--heavy``); so is this test (the suite's 35-minute budget). In CI,
``tests/connectors/kafka/test_sink_broker_restart.py`` kills a private broker and restarts it on its data,
and ``tests/connectors/kafka/test_kafka_sliced.py`` pauses one (SIGSTOP) of two.
"""

from __future__ import annotations

import time

import pytest

from connectors.kafka import consume_all, create_topic, produce
from connectors.kafka.local_broker import BrokerConfig, LocalKafkaBroker
from spark_ext.recovery.broker_faults import free_port

pytestmark = [pytest.mark.integration, pytest.mark.heavy]


def answers(broker: LocalKafkaBroker) -> bool:
    return broker._serves_metadata()


def test_own_broker_pauses_resumes_restarts_on_its_data_and_stops_at_once(tmp_path) -> None:
    port = free_port(19292)
    assert port != 9092
    broker = LocalKafkaBroker(
        BrokerConfig(data_dir=tmp_path / "kafka", port=port, controller_port=port + 1, heap="256m")
    )
    bootstrap = broker.start()
    try:
        create_topic(bootstrap, "kept", partitions=1)
        produce(bootstrap, "kept", [(None, b"a", 0)])

        broker.pause()  # SIGSTOP: the port still accepts, nothing answers
        assert broker.is_running() and not answers(broker)
        broker.resume()
        assert answers(broker)

        pid = broker.pid()
        broker.kill()  # SIGKILL, reaped: no zombie keeps the pid alive
        assert broker.pid() is None and not broker.is_running()
        assert broker.start() == bootstrap and broker.pid() != pid
        assert [v for *_, v in consume_all(bootstrap, "kept")] == [b"a"]

        started = time.monotonic()
        broker.stop()  # was a 30 s wait on the zombie of the broker it had started
        assert time.monotonic() - started < 15
        assert broker.pid() is None
    finally:
        broker.stop(hard=True)
