"""A private two-broker Kafka cluster, so one partition's leader can be paused on its own.

Broker 1 is the controller and a broker and holds every internal topic (transaction state,
consumer offsets: they are created before broker 2 joins), so the transaction coordinator and
the group coordinator keep answering while broker 2 -- the leader of the partitions a test
places on it -- is paused with SIGSTOP. That is the fault "a partition unavailable past the
producer's delivery timeout" (docs/design.md, fault points and invariant 5).

The shared broker on 127.0.0.1:9092 is never touched.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from connectors.kafka.local_broker import BrokerConfig, LocalKafkaBroker
from spark_ext import kafka_clients
from spark_ext.errors import BrokerError
from tests.conftest import free_ports


@dataclass(frozen=True)
class JoiningBrokerConfig(BrokerConfig):
    """A broker-only node (``node.id`` 2) that joins the quorum ``voters`` of the local broker
    whose cluster id is ``cluster_id``."""

    node_id: int = 2
    voters: str = ""
    cluster_id: str = ""

    def properties(self) -> dict[str, str]:
        return {
            **super().properties(),
            "process.roles": "broker",
            "node.id": str(self.node_id),
            "controller.quorum.voters": self.voters,
            "listeners": f"PLAINTEXT://{self.host}:{self.port}",
        }

    def format_options(self) -> list[str]:
        return [f"--cluster-id={self.cluster_id}"]


def _cluster_id(log_dir: Path) -> str:
    for line in (log_dir / "meta.properties").read_text().splitlines():
        if line.startswith("cluster.id="):
            return line.split("=", 1)[1].strip()
    raise BrokerError(f"no cluster.id in {log_dir / 'meta.properties'}")


def _warm_internal_topics(bootstrap: str) -> None:
    """Create ``__transaction_state`` and ``__consumer_offsets`` while broker 1 is alone."""
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition

    producer = KafkaProducer(bootstrap_servers=bootstrap, transactional_id="warm.txn")
    producer.init_transactions()
    producer.close()
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id="warm.group")
    consumer.committed(TopicPartition("warm", 0))
    consumer.close()


def _wait_for_brokers(bootstrap: str, n: int, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    with kafka_clients.admin(bootstrap) as admin:
        while len(admin.describe_cluster()["brokers"]) < n:
            if time.monotonic() > deadline:
                raise BrokerError(f"{n} brokers did not register within {timeout_s}s")
            time.sleep(0.5)


@dataclass
class TwoBrokers:
    """The running cluster: ``bootstrap`` is broker 1; ``second`` can be paused."""

    first: LocalKafkaBroker
    second: LocalKafkaBroker

    @property
    def bootstrap(self) -> str:
        return self.first.config.bootstrap_servers

    def create_topic(self, name: str, leaders: list[int]) -> None:
        """A topic whose partition ``i`` has its only replica on broker ``leaders[i]``."""
        from kafka.admin import NewTopic

        assignment = {i: [b] for i, b in enumerate(leaders)}
        with kafka_clients.admin(self.bootstrap) as admin:
            admin.create_topics([NewTopic(name, replica_assignments=assignment)])

    @contextmanager
    def second_paused(self) -> Iterator[None]:
        """SIGSTOP broker 2 for the block (SIGCONT after it, whatever happens)."""
        pid = self.second.pid()
        assert pid is not None, "broker 2 is not running"
        os.kill(pid, signal.SIGSTOP)
        try:
            yield
        finally:
            os.kill(pid, signal.SIGCONT)


@contextmanager
def two_brokers(root: Path) -> Iterator[TwoBrokers]:
    """Start broker 1 (controller + broker) and broker 2 (broker); stop both at the end."""
    port1, controller, port2 = free_ports(3)
    first = LocalKafkaBroker(
        BrokerConfig(data_dir=root / "b1", port=port1, controller_port=controller, heap="512m")
    )
    second: LocalKafkaBroker | None = None
    try:
        first.start()
        _warm_internal_topics(first.config.bootstrap_servers)
        second = LocalKafkaBroker(
            JoiningBrokerConfig(
                data_dir=root / "b2",
                port=port2,
                controller_port=controller,
                heap="512m",
                voters=f"1@127.0.0.1:{controller}",
                cluster_id=_cluster_id(first.config.log_dir),
            )
        )
        second.start()
        _wait_for_brokers(first.config.bootstrap_servers, 2)
        yield TwoBrokers(first, second)
    finally:
        if second is not None:
            second.stop(hard=True)
        first.stop(hard=True)
