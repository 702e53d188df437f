"""The project's own Apache Kafka broker: formats once, starts, answers, stops by PID, keeps data."""

from __future__ import annotations

import pytest

from connectors.kafka import consume_all, create_topic, produce
from connectors.kafka.local_broker import BrokerConfig, LocalKafkaBroker

pytestmark = pytest.mark.integration


def test_private_broker_restarts_by_pid_with_its_data(tmp_path) -> None:
    broker = LocalKafkaBroker(
        BrokerConfig(data_dir=tmp_path / "kafka", port=19192, controller_port=19193, heap="256m")
    )
    bootstrap = broker.start()
    try:
        pid = broker.pid()
        assert pid is not None and broker.is_running()
        assert "transaction.max.timeout.ms=900000" in broker.config.properties_file.read_text()
        create_topic(bootstrap, "kept", partitions=2)
        produce(bootstrap, "kept", [(None, b"a", 0), (None, b"b", 1)])

        broker.stop()
        assert not broker.is_running() and broker.pid() is None

        assert broker.start() == bootstrap
        assert broker.pid() != pid
        assert [v for *_, v in consume_all(bootstrap, "kept")] == [b"a", b"b"]
    finally:
        broker.stop(hard=True)


def test_transactions_work_on_one_node(kafka_bootstrap, new_topic) -> None:
    """Replication factor 1 for the transaction log: commit and abort both behave."""
    from kafka import KafkaProducer

    topic = new_topic("txn", partitions=1)
    producer = KafkaProducer(bootstrap_servers=kafka_bootstrap, transactional_id=f"{topic}-tx")
    producer.init_transactions()
    producer.begin_transaction()
    producer.send(topic, b"committed")
    producer.commit_transaction()
    producer.begin_transaction()
    producer.send(topic, b"aborted")
    producer.flush()
    producer.abort_transaction()
    producer.close()
    assert [v for *_, v in consume_all(kafka_bootstrap, topic)] == [b"committed"]
    assert b"aborted" in [v for *_, v in consume_all(kafka_bootstrap, topic, read_committed=False)]
