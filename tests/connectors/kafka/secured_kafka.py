"""A private broker with a SASL_PLAINTEXT/SCRAM-SHA-512 listener and an SSL listener (test
certificates made at start by :mod:`tests.connectors.kafka.tls`), on free ports; the shared
broker on 127.0.0.1:9092 is never touched (docs/design.md, "Kafka clients")."""

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
    """The local broker plus a SCRAM listener (user :data:`USER`) and an SSL listener with
    ``keystore`` (a PKCS12 file and its password)."""

    scram_port: int = 0
    ssl_port: int = 0
    keystore: tuple[Path, str] = field(default=(Path(), ""), repr=False)

    @property
    def scram_bootstrap(self) -> str:
        return f"{self.host}:{self.scram_port}"

    @property
    def ssl_bootstrap(self) -> str:
        return f"{self.host}:{self.ssl_port}"

    def properties(self) -> dict[str, str]:
        props = super().properties()
        added = f"SCRAM://{self.scram_bootstrap},TLS://{self.ssl_bootstrap}"
        return {
            **props,
            "listeners": f"{props['listeners']},{added}",
            "advertised.listeners": f"{props['advertised.listeners']},{added}",
            "listener.security.protocol.map": (
                f"{props['listener.security.protocol.map']},SCRAM:SASL_PLAINTEXT,TLS:SSL"
            ),
            "sasl.enabled.mechanisms": SCRAM,
            "listener.name.scram.sasl.enabled.mechanisms": SCRAM,
            f"listener.name.scram.{SCRAM.lower()}.sasl.jaas.config": (
                "org.apache.kafka.common.security.scram.ScramLoginModule required;"
            ),
            "listener.name.tls.ssl.keystore.location": str(self.keystore[0]),
            "listener.name.tls.ssl.keystore.password": self.keystore[1],
            "listener.name.tls.ssl.keystore.type": "PKCS12",
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
    tls: TlsFiles

    @property
    def scram(self) -> str:
        return self.config.scram_bootstrap

    @property
    def ssl(self) -> str:
        return self.config.ssl_bootstrap

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

    def profile(self, folder: Path, listener: str, base: str = "test") -> Path:
        """conf/<base>.toml with ``[kafka]`` for ``listener`` (``scram``: the password from
        :data:`PASSWORD_ENV`; ``ssl``)."""
        if listener == "scram":
            props = {
                "security.protocol": "SASL_PLAINTEXT",
                "sasl.mechanism": SCRAM,
                "sasl.username": USER,
                "sasl.password": f"${{env:{PASSWORD_ENV}}}",
            }
            bootstrap = self.scram
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


@contextmanager
def secured_kafka(folder: Path) -> Iterator[SecuredKafka]:
    """Start the broker in ``folder``, configure this process's clients of both listeners;
    stop it (SIGKILL if it does not stop) however the caller ends."""
    plain, controller, scram, ssl = free_ports(4)
    tls = make_certificates(folder / "tls")
    config = SecuredBrokerConfig(
        data_dir=folder,
        port=plain,
        controller_port=controller,
        scram_port=scram,
        ssl_port=ssl,
        keystore=(tls.keystore, tls.keystore_password),
        heap="512m",
    )
    broker = LocalKafkaBroker(config)
    secured = SecuredKafka(config, tls)
    try:
        broker.start(timeout=120)
        kafka_clients.configure(secured.scram, secured.scram_properties())
        kafka_clients.configure(secured.ssl, secured.ssl_properties())
        yield secured
    finally:
        kafka_clients.configure(config.scram_bootstrap, None)
        kafka_clients.configure(config.ssl_bootstrap, None)
        try:
            broker.stop(timeout=20)
        except Exception:
            broker.stop(hard=True)
