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
from dataclasses import dataclass, field
from pathlib import Path

from connectors.processes import command_line, java, port_open, read_pid, spawn, stop_pid
from spark_ext import jvm, kafka_clients
from spark_ext.errors import BrokerError
from spark_ext.jobrun import REPO

__all__ = [
    "LOG4J2",
    "SCRAM",
    "BrokerConfig",
    "LocalKafkaBroker",
    "main",
    "new_cluster_id",
    "private_broker",
]

log = logging.getLogger(__name__)

#: The SASL mechanism of the local broker's SCRAM listener.
SCRAM = "SCRAM-SHA-512"


@dataclass(frozen=True)
class BrokerConfig:
    """Where and how the local broker runs."""

    data_dir: Path = REPO / "var" / "kafka"
    port: int = 9092
    controller_port: int = 9093
    host: str = "127.0.0.1"
    heap: str = "1g"
    transaction_max_timeout_ms: int = 900_000
    #: For tests: a SASL_PLAINTEXT listener with SCRAM-SHA-512 for ``scram_users`` (name,
    #: password), and an SSL listener with ``ssl_keystore`` (a PKCS12 file and its password).
    scram_port: int | None = None
    ssl_port: int | None = None
    scram_users: tuple[tuple[str, str], ...] = field(default=(), repr=False)
    ssl_keystore: tuple[Path, str] | None = field(default=None, repr=False)

    @property
    def scram_bootstrap(self) -> str:
        """The SASL_PLAINTEXT/SCRAM-SHA-512 listener's address."""
        return f"{self.host}:{self.scram_port}"

    @property
    def ssl_bootstrap(self) -> str:
        """The SSL listener's address."""
        return f"{self.host}:{self.ssl_port}"

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

    def _secured_listeners(self) -> dict[str, str]:
        """The properties of the SCRAM and SSL listeners (none without their ports)."""
        props: dict[str, str] = {}
        if self.scram_port is not None:
            props["sasl.enabled.mechanisms"] = SCRAM
            props["listener.name.scram.sasl.enabled.mechanisms"] = SCRAM
            props[f"listener.name.scram.{SCRAM.lower()}.sasl.jaas.config"] = (
                "org.apache.kafka.common.security.scram.ScramLoginModule required;"
            )
        if self.ssl_port is not None and self.ssl_keystore is not None:
            props["listener.name.tls.ssl.keystore.location"] = str(self.ssl_keystore[0])
            props["listener.name.tls.ssl.keystore.password"] = self.ssl_keystore[1]
            props["listener.name.tls.ssl.keystore.type"] = "PKCS12"
        return props

    def server_properties(self) -> str:
        listeners = {"PLAINTEXT": (self.port, "PLAINTEXT")}
        if self.scram_port is not None:
            listeners["SCRAM"] = (self.scram_port, "SASL_PLAINTEXT")
        if self.ssl_port is not None:
            listeners["TLS"] = (self.ssl_port, "SSL")
        advertised = ",".join(
            f"{name}://{self.host}:{port}" for name, (port, _) in listeners.items()
        )
        protocols = ",".join(f"{name}:{protocol}" for name, (_, protocol) in listeners.items())
        props = {
            "process.roles": "broker,controller",
            "node.id": "1",
            "controller.quorum.voters": f"1@{self.host}:{self.controller_port}",
            "listeners": f"{advertised},CONTROLLER://{self.host}:{self.controller_port}",
            "advertised.listeners": advertised,
            "controller.listener.names": "CONTROLLER",
            "inter.broker.listener.name": "PLAINTEXT",
            "listener.security.protocol.map": f"CONTROLLER:PLAINTEXT,{protocols}",
            **self._secured_listeners(),
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
        return "".join(f"{k}={v}\n" for k, v in props.items())


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

    def cluster_id_to_format(self) -> str:
        """The cluster id a first start formats the storage with: a new one."""
        return new_cluster_id()

    def format_storage(self) -> None:
        """Format the KRaft storage on first start (a no-op when already formatted), with the
        SCRAM users the broker's own storage tool creates."""
        c = self.config
        c.data_dir.mkdir(parents=True, exist_ok=True)
        c.properties_file.write_text(c.server_properties())
        if (c.log_dir / "meta.properties").exists():
            return
        cmd = [
            java(),
            "-cp",
            _classpath(),
            "kafka.tools.StorageTool",
            "format",
            f"--cluster-id={self.cluster_id_to_format()}",
            "-c",
            str(c.properties_file),
        ]
        for name, password in c.scram_users:
            cmd += ["--add-scram", f"{SCRAM}=[name={name},password={password}]"]
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
