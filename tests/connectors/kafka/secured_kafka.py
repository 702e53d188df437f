"""A private broker with a SASL_PLAINTEXT/SCRAM-SHA-512 listener, an SSL listener and an SSL
listener that requires a client certificate (test certificates made at start by
:mod:`tests.connectors.kafka.tls`), on free ports; the shared broker on 127.0.0.1:9092 is never
touched (docs/design.md, "Kafka clients")."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from connectors.kafka.local_broker import BrokerConfig, LocalKafkaBroker
from spark_ext import kafka_clients
from spark_ext.config import CONF_DIR
from tests.conftest import free_ports
from tests.connectors.kafka.tls import TlsFiles, make_certificates

USER = "spark-ext"
PASSWORD = "scram-secret-7"
#: The environment variable a profile of :meth:`SecuredKafka.profile` reads the password from.
PASSWORD_ENV = "SPARK_EXT_TEST_KAFKA_PASSWORD"
#: The SASL mechanism of the SCRAM listener.
SCRAM = "SCRAM-SHA-512"


@dataclass(frozen=True)
class SecuredBrokerConfig(BrokerConfig):
    """The local broker plus a SCRAM listener (user :data:`USER`), an SSL listener and an SSL
    listener with ``ssl.client.auth=required`` (``MTLS``), with the certificates of ``tls``."""

    scram_port: int = 0
    ssl_port: int = 0
    mtls_port: int = 0
    tls: TlsFiles = field(default=TlsFiles(Path(), Path(), Path()), repr=False)

    @property
    def scram_bootstrap(self) -> str:
        return f"{self.host}:{self.scram_port}"

    @property
    def ssl_bootstrap(self) -> str:
        return f"{self.host}:{self.ssl_port}"

    @property
    def mtls_bootstrap(self) -> str:
        return f"{self.host}:{self.mtls_port}"

    def properties(self) -> dict[str, str]:
        props = super().properties()
        added = (
            f"SCRAM://{self.scram_bootstrap},TLS://{self.ssl_bootstrap},"
            f"MTLS://{self.mtls_bootstrap}"
        )
        keystore = {
            f"listener.name.{name}.{key}": value
            for name in ("tls", "mtls")
            for key, value in (
                ("ssl.keystore.location", str(self.tls.keystore)),
                ("ssl.keystore.password", self.tls.keystore_password),
                ("ssl.keystore.type", "PKCS12"),
            )
        }
        return {
            **props,
            "listeners": f"{props['listeners']},{added}",
            "advertised.listeners": f"{props['advertised.listeners']},{added}",
            "listener.security.protocol.map": (
                f"{props['listener.security.protocol.map']},SCRAM:SASL_PLAINTEXT,TLS:SSL,MTLS:SSL"
            ),
            "sasl.enabled.mechanisms": SCRAM,
            "listener.name.scram.sasl.enabled.mechanisms": SCRAM,
            f"listener.name.scram.{SCRAM.lower()}.sasl.jaas.config": (
                "org.apache.kafka.common.security.scram.ScramLoginModule required;"
            ),
            **keystore,
            "listener.name.mtls.ssl.truststore.location": str(self.tls.ca_pem),
            "listener.name.mtls.ssl.truststore.type": "PEM",
            "listener.name.mtls.ssl.client.auth": "required",
        }

    def format_options(self) -> list[str]:
        return [
            *super().format_options(),
            "--add-scram",
            f"{SCRAM}=[name={USER},password={PASSWORD}]",
        ]


@dataclass(frozen=True)
class SecuredKafka:
    """The running broker's listeners and the client properties of each of its secured listeners."""

    config: SecuredBrokerConfig

    @property
    def tls(self) -> TlsFiles:
        return self.config.tls

    @property
    def scram(self) -> str:
        return self.config.scram_bootstrap

    @property
    def ssl(self) -> str:
        return self.config.ssl_bootstrap

    @property
    def mtls(self) -> str:
        return self.config.mtls_bootstrap

    def scram_properties(self, password: str = PASSWORD) -> dict[str, str]:
        return {
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": SCRAM,
            "sasl.jaas.config": (
                "org.apache.kafka.common.security.scram.ScramLoginModule required "
                f'username="{USER}" password="{password}";'
            ),
        }

    def ssl_properties(self) -> dict[str, str]:
        return {"security.protocol": "SSL", "ssl.truststore.location": str(self.tls.ca_pem)}

    def mtls_properties(self) -> dict[str, str]:
        """:meth:`ssl_properties` and the client's certificate (key and certificate, PEM)."""
        return {**self.ssl_properties(), "ssl.keystore.location": str(self.tls.client_pem)}

    def profile(self, folder: Path, listener: str, base: str = "test") -> Path:
        """conf/<base>.toml with ``[kafka]`` for ``listener`` (``scram``: the password from
        :data:`PASSWORD_ENV`; ``ssl``; ``mtls``)."""
        if listener == "scram":
            props = {
                "security.protocol": "SASL_PLAINTEXT",
                "sasl.mechanism": SCRAM,
                "sasl.username": USER,
                "sasl.password": f"${{env:{PASSWORD_ENV}}}",
            }
            bootstrap = self.scram
        elif listener == "mtls":
            props, bootstrap = self.mtls_properties(), self.mtls
        else:
            props, bootstrap = self.ssl_properties(), self.ssl
        test = (CONF_DIR / f"{base}.toml").read_text()
        head, _, tail = test.partition("[kafka]")
        rest = tail.split("\n[", 1)[1]
        section = "\n".join(f'"{k}" = "{v}"' for k, v in props.items())
        path = folder / f"secured-{listener}-{base}.toml"
        path.write_text(
            f'{head}[kafka]\nbootstrap_servers = "{bootstrap}"\n\n'
            f"[kafka.properties]\n{section}\n\n[{rest}"
        )
        return path

    def configure(self, on: bool = True) -> None:
        """Configure this process's clients of each secured listener (``on=False``: forget them)."""
        for bootstrap, props in (
            (self.scram, self.scram_properties()),
            (self.ssl, self.ssl_properties()),
            (self.mtls, self.mtls_properties()),
        ):
            kafka_clients.configure(bootstrap, props if on else None)


class SecuredBroker:
    """A broker with the secured listeners (:class:`SecuredBrokerConfig`): :meth:`start`
    configures this process's clients of each and returns the SCRAM listener, so the recovery
    harness's broker faults act on a secured broker (``brokers=secured_broker``)."""

    def __init__(self, config: SecuredBrokerConfig) -> None:
        self.kafka = SecuredKafka(config)
        self._broker = LocalKafkaBroker(config)

    def start(self, timeout: float = 120.0) -> str:
        self._broker.start(timeout=timeout)
        self.kafka.configure()
        return self.kafka.scram

    def stop(self, timeout: float = 20.0) -> None:
        """Stop it (SIGKILL if it does not stop) and forget its listeners' clients."""
        self.kafka.configure(on=False)
        try:
            self._broker.stop(timeout=timeout)
        except Exception:
            self._broker.stop(hard=True)

    def pause(self) -> None:
        self._broker.pause()

    def resume(self) -> None:
        self._broker.resume()

    def kill(self) -> None:
        self._broker.kill()


def secured_broker(data_dir: Path, port: int | None = None) -> SecuredBroker:
    """A secured broker in ``data_dir``, not started: its plaintext listener (inter-broker) on
    ``port`` and its controller on ``port + 1`` (none: free ports), the others on free ports,
    its certificates made in ``data_dir/tls``. The recovery harness's ``brokers`` factory."""
    scram, ssl, mtls, *free = free_ports(5)
    plain, controller = (port, port + 1) if port else free
    config = SecuredBrokerConfig(
        data_dir=data_dir,
        port=plain,
        controller_port=controller,
        scram_port=scram,
        ssl_port=ssl,
        mtls_port=mtls,
        tls=make_certificates(data_dir / "tls"),
        heap="512m",
    )
    return SecuredBroker(config)


@contextmanager
def secured_kafka(folder: Path) -> Iterator[SecuredKafka]:
    """Start a secured broker in ``folder``, configure this process's clients of its listeners;
    stop it however the caller ends."""
    broker = secured_broker(folder)
    try:
        broker.start()
        yield broker.kafka
    finally:
        broker.stop()
