"""Kafka topic administration with kafka-python: the one piece of Kafka I/O the core needs.

The tracker's Kafka agent (core) and the connectors (above the core) both create topics; this
base module holds that call once, so neither layer imports the other for it.

Example
-------
>>> create_topic("127.0.0.1:9092", "events", partitions=3)   # doctest: +SKIP
"""

from __future__ import annotations

__all__ = ["create_topic"]


def create_topic(bootstrap: str, name: str, partitions: int = 3, **configs: str) -> None:
    """Create ``name`` with ``partitions`` partitions (replication 1); no-op if it exists."""
    from kafka import KafkaAdminClient
    from kafka.admin import NewTopic
    from kafka.errors import TopicAlreadyExistsError

    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        admin.create_topics(
            [
                NewTopic(
                    name,
                    num_partitions=partitions,
                    replication_factor=1,
                    topic_configs=dict(configs),
                )
            ]
        )
    except TopicAlreadyExistsError:
        pass
    finally:
        admin.close()
