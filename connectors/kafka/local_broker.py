"""A single-node Kafka broker in KRaft mode on 127.0.0.1 (its own JVM from the cached jars),
configured for transactions: ``python -m connectors.kafka.local_broker start|stop|status``."""

from __future__ import annotations

import base64
import logging
import os
import signal
import subprocess
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from connectors.processes import command_line, java, port_open, read_pid, spawn, stop_pid
from spark_ext import jvm, kafka_clients
from spark_ext.errors import BrokerError
from spark_ext.jobrun import REPO

__all__ = ["BrokerConfig", "LocalKafkaBroker", "main", "new_cluster_id", "private_broker"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class BrokerConfig:
    """Where and how the local broker runs (a test's subclass adds listeners:
    :meth:`properties`, :meth:`format_options`)."""

    data_dir: Path = REPO / "var" / "kafka"
    port: int = 9092
    controller_port: int = 9093
    host: str = "127.0.0.1"
    heap: str = "1g"
    transaction_max_timeout_ms: int = 900_000

    @property
    def bootstrap_servers(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def pid_file(self) -> Path:
        return self.data_dir / "broker.pid"

    @property
    def properties_file(self) -> Path:
        return self.data_dir / "server.properties"

    @property
    def log_dir(self) -> Path:
        return self.data_dir / "logs"

    def properties(self) -> dict[str, str]:
        """The broker's ``server.properties``."""
        listener = f"PLAINTEXT://{self.host}:{self.port}"
        return {
            "process.roles": "broker,controller",
            "node.id": "1",
            "controller.quorum.voters": f"1@{self.host}:{self.controller_port}",
            "listeners": f"{listener},CONTROLLER://{self.host}:{self.controller_port}",
            "advertised.listeners": listener,
            "controller.listener.names": "CONTROLLER",
            "inter.broker.listener.name": "PLAINTEXT",
            "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
            "log.dirs": str(self.log_dir),
            "num.partitions": "1",
            "auto.create.topics.enable": "true",
            "offsets.topic.replication.factor": "1",
            "offsets.topic.num.partitions": "4",
            "transaction.state.log.replication.factor": "1",
            "transaction.state.log.min.isr": "1",
            "transaction.state.log.num.partitions": "4",
            "transaction.max.timeout.ms": str(self.transaction_max_timeout_ms),
            "group.initial.rebalance.delay.ms": "0",
            "share.coordinator.state.topic.replication.factor": "1",
            "share.coordinator.state.topic.min.isr": "1",
            "log.retention.hours": "-1",
            "log.segment.bytes": str(256 * 1024 * 1024),
        }

    def format_options(self) -> list[str]:
        """The storage tool's options at a first start: a new cluster id."""
        return [f"--cluster-id={new_cluster_id()}"]


LOG4J2 = """\
status = warn
appender.file.type = File
appender.file.name = file
appender.file.fileName = {log}
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = WARN
rootLogger.appenderRef.file.ref = file
logger.server.name = kafka.server.KafkaRaftServer
logger.server.level = INFO
"""


def _classpath() -> str:
    return os.pathsep.join(str(p) for p in jvm.kafka_broker_classpath())


def new_cluster_id(draw: Callable[[], bytes] = lambda: uuid.uuid4().bytes) -> str:
    """A KRaft cluster id as Kafka's ``Uuid.randomUuid()`` makes one, drawn again while it
    starts with ``-`` (the storage tool takes such an id for an option: 1 start in 64 failed)."""
    while True:
        cluster_id = base64.urlsafe_b64encode(draw()).decode().rstrip("=")
        if not cluster_id.startswith("-"):
            return cluster_id


class LocalKafkaBroker:
    """Start, wait for, and stop the local broker by its PID (``LocalKafkaBroker().ensure_running()``
    returns its bootstrap servers)."""

    def __init__(self, config: BrokerConfig | None = None) -> None:
        self.config = config or BrokerConfig()
        self._proc: subprocess.Popen[bytes] | None = None

    def pid(self) -> int | None:
        return read_pid(self.config.pid_file, child=self._proc)

    def is_running(self) -> bool:
        return port_open(self.config.host, self.config.port)

    def format_storage(self) -> None:
        """Format the KRaft storage on first start (a no-op when already formatted)."""
        c = self.config
        c.data_dir.mkdir(parents=True, exist_ok=True)
        c.properties_file.write_text("".join(f"{k}={v}\n" for k, v in c.properties().items()))
        if (c.log_dir / "meta.properties").exists():
            return
        cmd = [java(), "-cp", _classpath(), "kafka.tools.StorageTool", "format"]
        cmd += [*c.format_options(), "-c", str(c.properties_file)]
        result = subprocess.run(cmd, capture_output=True, text=True, env=self._env())
        if result.returncode != 0:
            raise BrokerError(f"formatting {c.log_dir} failed: {result.stderr or result.stdout}")

    def _env(self) -> dict[str, str]:
        c = self.config
        log4j = c.data_dir / "log4j2.properties"
        log4j.write_text(LOG4J2.format(log=c.data_dir / "server.log"))
        env = dict(os.environ)
        env["JAVA_TOOL_OPTIONS"] = ""
        env["KAFKA_LOG4J_OPTS"] = f"-Dlog4j2.configurationFile={log4j}"
        return env

    def start(self, timeout: float = 60.0) -> str:
        """Start the broker and wait until it serves metadata; returns bootstrap servers."""
        c = self.config
        if self.is_running():
            return c.bootstrap_servers
        self.format_storage()
        env = self._env()
        cmd = [
            java(),
            f"-Xmx{c.heap}",
            f"-Xms{c.heap}",
            "-XX:+UseSerialGC",
            env["KAFKA_LOG4J_OPTS"],
            "-cp",
            _classpath(),
            "kafka.Kafka",
            str(c.properties_file),
        ]
        proc = spawn(cmd, env, c.data_dir / "stdout.log", c.pid_file)
        self._proc = proc
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise BrokerError(
                    f"broker exited with {proc.returncode}; see {c.data_dir / 'server.log'}"
                )
            if self.is_running() and self._serves_metadata():
                log.info("Kafka broker %s up (pid %d)", c.bootstrap_servers, proc.pid)
                return c.bootstrap_servers
            time.sleep(0.5)
        raise BrokerError(f"broker did not answer on {c.bootstrap_servers} within {timeout}s")

    def _serves_metadata(self) -> bool:
        from kafka.errors import KafkaError

        try:
            with kafka_clients.admin(
                self.config.bootstrap_servers, request_timeout_ms=3000
            ) as admin:
                admin.list_topics()
            return True
        except KafkaError:
            return False

    def ensure_running(self) -> str:
        """Start the broker unless one already answers on the port (:meth:`start`)."""
        return self.start()

    def stop(self, timeout: float = 30.0, hard: bool = False) -> None:
        """Stop the broker by its PID (SIGTERM, or SIGKILL with ``hard``) and wait for it."""
        pid = self.pid()
        if pid is None:
            self.config.pid_file.unlink(missing_ok=True)
            return
        stop_pid(pid, timeout, hard, self._proc)
        while port_open(self.config.host, self.config.port):
            time.sleep(0.2)
        self.config.pid_file.unlink(missing_ok=True)
        self._proc = None

    # faults, for the recovery harness (only ever on a broker of its own)
    def _signal(self, sig: signal.Signals) -> int:
        pid = self.pid()
        if pid is None:
            raise BrokerError(f"no broker running for {self.config.data_dir}")
        os.kill(pid, sig)
        return pid

    def pause(self) -> None:
        """SIGSTOP the broker: connections stay open, nothing is answered until :meth:`resume`."""
        self._signal(signal.SIGSTOP)
        log.info("Kafka broker %s paused", self.config.bootstrap_servers)

    def resume(self) -> None:
        """SIGCONT a paused broker."""
        self._signal(signal.SIGCONT)
        log.info("Kafka broker %s resumed", self.config.bootstrap_servers)

    def kill(self) -> None:
        """SIGKILL the broker (no clean shutdown) and reap it; :meth:`start` restarts it."""
        self.stop(hard=True)
        log.info("Kafka broker %s killed", self.config.bootstrap_servers)


def private_broker(data_dir: Path, port: int) -> LocalKafkaBroker:
    """A broker of its own in ``data_dir`` on ``port`` (controller: ``port + 1``), not started:
    the recovery harness's ``brokers`` factory for its broker faults."""
    return LocalKafkaBroker(BrokerConfig(data_dir=data_dir, port=port, controller_port=port + 1))


def main() -> None:
    command_line(
        "kafka broker",
        lambda folder, port: private_broker(folder or BrokerConfig.data_dir, port or 9092),
    )


if __name__ == "__main__":
    main()
