"""Every Kafka client the project builds, built here (docs/design.md, "Kafka clients").

>>> create_topic("127.0.0.1:9092", "events", partitions=3)   # doctest: +SKIP
>>> with admin("127.0.0.1:9092") as a:                        # doctest: +SKIP
...     topics = a.list_topics()
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

__all__ = ["admin", "confluent_config", "consumer", "create_topic", "producer"]


def consumer(bootstrap: str, **config: Any) -> Any:
    """A kafka-python ``KafkaConsumer`` of ``bootstrap`` with ``config``."""
    from kafka import KafkaConsumer

    return KafkaConsumer(bootstrap_servers=bootstrap, **config)


def producer(bootstrap: str, **config: Any) -> Any:
    """A kafka-python ``KafkaProducer`` of ``bootstrap`` with ``config``."""
    from kafka import KafkaProducer

    return KafkaProducer(bootstrap_servers=bootstrap, **config)


@contextmanager
def admin(bootstrap: str, **config: Any) -> Iterator[Any]:
    """A kafka-python ``KafkaAdminClient`` of ``bootstrap``, closed on exit."""
    from kafka import KafkaAdminClient

    client = KafkaAdminClient(bootstrap_servers=bootstrap, **config)
    try:
        yield client
    finally:
        client.close()


def confluent_config(bootstrap: str, config: Mapping[str, Any]) -> dict[str, Any]:
    """A confluent-kafka (librdkafka) client configuration for ``bootstrap`` with ``config``."""
    return {"bootstrap.servers": bootstrap, **config}


def create_topic(bootstrap: str, name: str, partitions: int = 3, **configs: str) -> None:
    """Create ``name`` with ``partitions`` partitions (replication 1); no-op if it exists."""
    from kafka.admin import NewTopic
    from kafka.errors import TopicAlreadyExistsError

    topic = NewTopic(
        name, num_partitions=partitions, replication_factor=1, topic_configs=dict(configs)
    )
    with admin(bootstrap) as client:
        try:
            client.create_topics([topic])
        except TopicAlreadyExistsError:
            pass
