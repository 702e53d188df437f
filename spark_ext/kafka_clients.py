"""Every Kafka client the project builds, built here, with the client properties of its cluster
(SASL, TLS) applied (docs/design.md, "Kafka clients").

>>> configure("broker:9096", {"security.protocol": "SASL_SSL",          # doctest: +SKIP
...                           "sasl.mechanism": "SCRAM-SHA-512",
...                           "sasl.username": "etl", "sasl.password": "..."})
>>> create_topic("127.0.0.1:9092", "events", partitions=3)   # doctest: +SKIP
>>> with admin("127.0.0.1:9092") as a:                        # doctest: +SKIP
...     topics = a.list_topics()
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from spark_ext.errors import ConfigError, SparkExtError

__all__ = [
    "PROBE_S",
    "KafkaAccess",
    "KafkaAuthenticationError",
    "KafkaProperties",
    "KafkaTlsError",
    "access",
    "admin",
    "check_access",
    "configure",
    "confluent_config",
    "consumer",
    "create_topic",
    "producer",
    "properties_of",
    "spark_options",
]

log = logging.getLogger(__name__)

#: How long :func:`check_access` waits for a secured cluster's first answer.
PROBE_S = 10.0

PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
_LOGIN_MODULES = {
    "PLAIN": "org.apache.kafka.common.security.plain.PlainLoginModule",
    "SCRAM-SHA-256": "org.apache.kafka.common.security.scram.ScramLoginModule",
    "SCRAM-SHA-512": "org.apache.kafka.common.security.scram.ScramLoginModule",
}
#: Kafka property -> (kafka-python argument, librdkafka property). ``sasl.jaas.config`` is read
#: into ``sasl.username``/``sasl.password``; ``ssl.*.location`` files are PEM.
_MAPPED: dict[str, tuple[str, str]] = {
    "security.protocol": ("security_protocol", "security.protocol"),
    "sasl.mechanism": ("sasl_mechanism", "sasl.mechanism"),
    "sasl.username": ("sasl_plain_username", "sasl.username"),
    "sasl.password": ("sasl_plain_password", "sasl.password"),
    "ssl.truststore.location": ("ssl_cafile", "ssl.ca.location"),
    "ssl.keystore.location": ("ssl_certfile", "ssl.certificate.location"),
    "ssl.key.password": ("ssl_password", "ssl.key.password"),
}
#: Accepted besides :data:`_MAPPED`: read while mapping, or for Spark's Java client only.
_READ = ("sasl.jaas.config", "ssl.truststore.type", "ssl.keystore.type")
_HOSTNAME = "ssl.endpoint.identification.algorithm"
KNOWN = (*_MAPPED, *_READ, _HOSTNAME)
#: Properties whose values are never shown (reprs, errors, logs).
SECRETS = ("sasl.jaas.config", "sasl.password", "ssl.key.password")
#: A TLS alert the listener sent (OpenSSL's words, as librdkafka reports them).
_ALERT = re.compile(r"ssl/tls alert ([a-z ]+): SSL alert number (\d+)")
#: The alerts that refuse the client's certificate (RFC 8446 6.2: 42-46, unknown_ca 48,
#: certificate_required 116).
_CERTIFICATE_ALERTS = frozenset({42, 43, 44, 45, 46, 48, 116})
_JAAS = re.compile(r"^\s*(\S+)\s+required\b(.*?);?\s*$", re.S)
_JAAS_OPTION = re.compile(r'(\w+)\s*=\s*"((?:[^"\\]|\\.)*)"')


class KafkaAuthenticationError(SparkExtError):
    """A secured Kafka listener refused the client's credentials (SASL): raised at start by
    :func:`check_access`, naming the listener and the user, never the secret."""

    def __init__(self, listener: str, detail: str) -> None:
        self.listener = listener
        super().__init__(f"Kafka {listener} refused the credentials: {detail}")
        self.fix = "check sasl.username/sasl.password (or sasl.jaas.config) in [kafka.properties]"


class KafkaTlsError(SparkExtError):
    """The TLS handshake with a Kafka listener failed (untrusted certificate, wrong host name,
    a listener that speaks no TLS, a client certificate missing or refused): raised at start
    by :func:`check_access`."""

    def __init__(self, listener: str, detail: str, fix: str = "") -> None:
        self.listener = listener
        super().__init__(f"Kafka {listener}: TLS handshake failed: {detail}")
        self.fix = fix or (
            "check ssl.truststore.location (a PEM CA file) and the listener's protocol"
        )


class _Secret(str):
    """A secret string that shows as ``'***'``: kafka-python logs its whole configuration."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "'***'"


def _unquote(value: str) -> str:
    return re.sub(r"\\(.)", r"\1", value)


def _quote(value: str) -> str:
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _parse_jaas(value: str) -> tuple[str, dict[str, str]]:
    """The login module and options of a ``sasl.jaas.config`` value (secrets not in errors)."""
    found = _JAAS.match(value)
    if found is None:
        raise ConfigError(
            "kafka.properties.sasl.jaas.config",
            'not \'<LoginModule> required username="..." password="...";\'',
        )
    options = {k: _unquote(v) for k, v in _JAAS_OPTION.findall(found.group(2))}
    return found.group(1), options


class KafkaProperties(Mapping[str, str]):
    """Client properties of one Kafka cluster in Kafka's names, validated once, mapped to each
    client's (:meth:`kafka_python`, :meth:`librdkafka`, :meth:`java`); secrets never shown
    (docs/design.md, "Kafka clients")."""

    def __init__(self, properties: Mapping[str, Any] | None = None) -> None:
        self._props = self._normalised(dict(properties or {}))

    @staticmethod
    def _normalised(raw: dict[str, Any]) -> dict[str, str]:
        props: dict[str, str] = {}
        for key, value in raw.items():
            if key not in KNOWN:
                raise ConfigError(
                    f"kafka.properties.{key}",
                    f"not a client property spark_ext maps (known: {', '.join(sorted(KNOWN))})",
                )
            if not isinstance(value, (str, int, bool)):
                raise ConfigError(f"kafka.properties.{key}", "must be a string")
            props[key] = str(value).lower() if isinstance(value, bool) else str(value)
        if "sasl.jaas.config" in props:
            module, options = _parse_jaas(props.pop("sasl.jaas.config"))
            if module not in set(_LOGIN_MODULES.values()):
                raise ConfigError(
                    "kafka.properties.sasl.jaas.config",
                    f"login module {module} is not supported (PLAIN and SCRAM are)",
                )
            for option in ("username", "password"):
                if option in options:
                    props.setdefault(f"sasl.{option}", options[option])
        protocol = props.get("security.protocol", "PLAINTEXT").upper()
        if "security.protocol" in props:
            props["security.protocol"] = protocol
        if protocol not in PROTOCOLS:
            raise ConfigError(
                "kafka.properties.security.protocol", f"{protocol!r} is not one of {PROTOCOLS}"
            )
        if protocol.startswith("SASL_"):
            mechanism = props.get("sasl.mechanism", "")
            if mechanism not in MECHANISMS:
                raise ConfigError(
                    "kafka.properties.sasl.mechanism",
                    f"{mechanism or 'missing'}: {protocol} needs one of {MECHANISMS}",
                )
            for option in ("username", "password"):
                if not props.get(f"sasl.{option}"):
                    raise ConfigError(
                        f"kafka.properties.sasl.{option}",
                        f"{protocol} needs a {option} (or sasl.jaas.config)",
                    )
        for kind in ("truststore", "keystore"):
            if f"ssl.{kind}.location" in props:
                declared = props.setdefault(f"ssl.{kind}.type", "PEM").upper()
                if declared != "PEM":
                    raise ConfigError(
                        f"kafka.properties.ssl.{kind}.type",
                        f"{declared}: the Python clients read PEM files only",
                    )
        return props

    def __getitem__(self, key: str) -> str:
        return self._props[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._props)

    def __len__(self) -> int:
        return len(self._props)

    def __hash__(self) -> int:
        return hash(tuple(sorted(self._props.items())))

    def __repr__(self) -> str:
        shown = {k: "***" if k in SECRETS else v for k, v in sorted(self._props.items())}
        return f"KafkaProperties({shown})"

    @property
    def protocol(self) -> str:
        return self._props.get("security.protocol", "PLAINTEXT")

    @property
    def secured(self) -> bool:
        """Whether the cluster is reached with SASL or TLS."""
        return self.protocol != "PLAINTEXT"

    def listener(self, bootstrap: str) -> str:
        """``bootstrap`` with its protocol, mechanism and user, for errors and logs."""
        parts = [self.protocol]
        if self.protocol.startswith("SASL_"):
            parts += [self._props["sasl.mechanism"], f"user {self._props['sasl.username']}"]
        return f"{bootstrap} ({', '.join(parts)})"

    def kafka_python(self) -> dict[str, Any]:
        """The arguments kafka-python's clients take."""
        out: dict[str, Any] = {
            _MAPPED[k][0]: _Secret(v) if k in SECRETS else v
            for k, v in self._props.items()
            if k in _MAPPED and v != ""
        }
        if "ssl.keystore.location" in self._props:
            out["ssl_keyfile"] = self._props["ssl.keystore.location"]
        if self._props.get(_HOSTNAME) == "":
            out["ssl_check_hostname"] = False
        return out

    def librdkafka(self) -> dict[str, Any]:
        """The properties confluent-kafka (librdkafka) takes."""
        out: dict[str, Any] = {
            _MAPPED[k][1]: v for k, v in self._props.items() if k in _MAPPED and v != ""
        }
        if "ssl.keystore.location" in self._props:
            out["ssl.key.location"] = self._props["ssl.keystore.location"]
        if _HOSTNAME in self._props:
            out[_HOSTNAME] = self._props[_HOSTNAME] or "none"
        return out

    def java(self) -> dict[str, str]:
        """The properties of Kafka's Java client (Spark's source and sink), with
        ``sasl.jaas.config`` made from the user and password."""
        out = {k: v for k, v in self._props.items() if k not in ("sasl.username", "sasl.password")}
        if self.protocol.startswith("SASL_"):
            module = _LOGIN_MODULES[self._props["sasl.mechanism"]]
            user, password = self._props["sasl.username"], self._props["sasl.password"]
            out["sasl.jaas.config"] = (
                f"{module} required username={_quote(user)} password={_quote(password)};"
            )
        return out


#: The client properties of each cluster, by bootstrap servers (:func:`configure`).
_CLUSTERS: dict[str, KafkaProperties] = {}
_CHECKED: set[tuple[str, KafkaProperties]] = set()
_LOCK = threading.Lock()


def configure(
    bootstrap: str, properties: Mapping[str, Any] | KafkaProperties | None
) -> KafkaProperties:
    """Use ``properties`` (Kafka's names: ``security.protocol``, ``sasl.*``, ``ssl.*``) for
    every client of ``bootstrap`` this process builds; returns them validated (a bad one:
    :class:`~spark_ext.errors.ConfigError` naming it)."""
    props = properties if isinstance(properties, KafkaProperties) else KafkaProperties(properties)
    with _LOCK:
        if props.secured:
            _CLUSTERS[bootstrap] = props
        else:
            _CLUSTERS.pop(bootstrap, None)
    return props


def properties_of(bootstrap: str) -> KafkaProperties:
    """The client properties :func:`configure` set for ``bootstrap`` (none: plaintext)."""
    return _CLUSTERS.get(bootstrap) or KafkaProperties()


@dataclass(frozen=True, repr=False)
class KafkaAccess:
    """A cluster's bootstrap servers and client properties, carried to tasks: unpickling it
    configures the worker (:func:`configure`; docs/design.md, "Kafka clients")."""

    bootstrap: str
    properties: KafkaProperties

    def __reduce__(self) -> tuple[Any, tuple[str, dict[str, str]]]:
        return _arrive, (self.bootstrap, dict(self.properties))

    def __repr__(self) -> str:
        return f"KafkaAccess({self.properties.listener(self.bootstrap)})"

    def options(self) -> dict[str, str]:
        """The properties as ``kafka.``-prefixed string options (a data source's options)."""
        return {f"kafka.{k}": v for k, v in self.properties.items()}

    @staticmethod
    def from_options(bootstrap: str, options: Mapping[str, str]) -> KafkaAccess:
        """:meth:`options` read back, and applied to this process (:func:`configure`)."""
        found = {k[len("kafka.") :]: v for k, v in options.items() if k.startswith("kafka.")}
        return _arrive(bootstrap, found)


def _arrive(bootstrap: str, properties: Mapping[str, str]) -> KafkaAccess:
    return KafkaAccess(bootstrap, configure(bootstrap, properties))


def access(bootstrap: str) -> KafkaAccess:
    """``bootstrap`` with its client properties, to give to a task (:class:`KafkaAccess`)."""
    return KafkaAccess(bootstrap, properties_of(bootstrap))


def spark_options(bootstrap: str) -> dict[str, str]:
    """Spark's Kafka source and sink options for ``bootstrap`` (``kafka.``-prefixed), after
    :func:`check_access`."""
    check_access(bootstrap)
    java = properties_of(bootstrap).java()
    return {"kafka.bootstrap.servers": bootstrap, **{f"kafka.{k}": v for k, v in java.items()}}


def check_access(bootstrap: str) -> None:
    """Once per process and cluster: probe a secured ``bootstrap`` with librdkafka and raise
    :class:`KafkaAuthenticationError` or :class:`KafkaTlsError`; any other outcome is left to
    the clients (docs/design.md, "Kafka clients": wrong credentials fail at start)."""
    props = properties_of(bootstrap)
    if not props.secured or (bootstrap, props) in _CHECKED:
        return
    from confluent_kafka import KafkaError, KafkaException
    from confluent_kafka.admin import AdminClient

    errors: list[Any] = []
    lines = _ProbeLog()
    config = confluent_config(bootstrap, {"error_cb": errors.append, "logger": lines}, check=False)
    try:
        client = AdminClient(config)
    except KafkaException as exc:  # a certificate or key file it cannot read
        raise _unreadable(props, exc.args[0].str()) from None
    listener = props.listener(bootstrap)
    deadline = time.monotonic() + PROBE_S
    while time.monotonic() < deadline:
        try:
            client.list_topics(timeout=0.5)
            break
        except KafkaException:
            client.poll(0)
        for err in errors:
            detail = err.str().split(": ", 1)[-1].removeprefix("SSL handshake failed: ")
            if err.code() == KafkaError._AUTHENTICATION:
                raise KafkaAuthenticationError(listener, detail)
            if err.code() == KafkaError._SSL or "SSL handshake failed" in err.str():
                raise KafkaTlsError(listener, detail)
            if alert := _ALERT.search(err.str()):
                raise _refused(listener, props, alert.group(1), int(alert.group(2)))
        if lines.hung_up >= 3:  # TLS listener, plaintext client: closed before any answer
            raise KafkaTlsError(
                listener,
                "the listener closes the connection before answering (does it expect TLS?)",
            )
        if errors:  # refused, unreachable, ...: what the clients and preflight checks report
            return
    else:  # not probed again: a paused broker must not cost every client the wait
        log.warning("Kafka %s did not answer within %.0f s", listener, PROBE_S)
    _CHECKED.add((bootstrap, props))


def _unreadable(props: KafkaProperties, detail: str) -> ConfigError:
    """librdkafka's refusal of its configuration, named by the property that gave the file it
    could not read (else the whole section)."""
    names = {lib: kafka for kafka, (_, lib) in _MAPPED.items()}
    names["ssl.key.location"] = "ssl.keystore.location"
    setting = next((names[n] for n in names if f"{n} failed" in detail), "")
    if not setting:
        return ConfigError("kafka.properties", detail)
    return ConfigError(f"kafka.properties.{setting}", f"{props.get(setting)}: {detail}")


def _refused(listener: str, props: KafkaProperties, alert: str, number: int) -> KafkaTlsError:
    """The error of a TLS alert from the listener: a refused client certificate says which
    (none, or the file given) and how to give one."""
    said = f"the listener sent TLS alert {number} ({alert})"
    if number not in _CERTIFICATE_ALERTS:
        return KafkaTlsError(listener, said)
    given = props.get("ssl.keystore.location")
    which = f"client certificate {given} refused" if given else "no client certificate given"
    return KafkaTlsError(
        listener,
        f"{which}: {said}; the listener requires one it trusts (ssl.client.auth=required)",
        fix="set ssl.keystore.location to a PEM file with the client's key and a certificate "
        "signed by a CA the listener trusts",
    )


class _ProbeLog:
    """librdkafka's log lines of a probe, at DEBUG, counting hang-ups before any answer."""

    def __init__(self) -> None:
        self.hung_up = 0

    def log(self, level: int, msg: str, *args: object) -> None:
        line = msg % args if args else msg
        if "Disconnected" in line and "APIVERSION_QUERY" in line:
            self.hung_up += 1
        log.debug("librdkafka: %s", line)


def _kafka_python(bootstrap: str, config: Mapping[str, Any]) -> dict[str, Any]:
    check_access(bootstrap)
    return {"bootstrap_servers": bootstrap, **properties_of(bootstrap).kafka_python(), **config}


def consumer(bootstrap: str, **config: Any) -> Any:
    """A kafka-python ``KafkaConsumer`` of ``bootstrap`` with its properties and ``config``."""
    from kafka import KafkaConsumer

    return KafkaConsumer(**_kafka_python(bootstrap, config))


def producer(bootstrap: str, **config: Any) -> Any:
    """A kafka-python ``KafkaProducer`` of ``bootstrap`` with its properties and ``config``."""
    from kafka import KafkaProducer

    return KafkaProducer(**_kafka_python(bootstrap, config))


@contextmanager
def admin(bootstrap: str, **config: Any) -> Iterator[Any]:
    """A kafka-python ``KafkaAdminClient`` of ``bootstrap`` (its properties), closed on exit."""
    from kafka import KafkaAdminClient

    client = KafkaAdminClient(**_kafka_python(bootstrap, config))
    try:
        yield client
    finally:
        client.close()


def confluent_config(
    bootstrap: str, config: Mapping[str, Any], check: bool = True
) -> dict[str, Any]:
    """A confluent-kafka (librdkafka) client configuration for ``bootstrap`` with its
    properties and ``config`` (``check``: :func:`check_access` first)."""
    if check:
        check_access(bootstrap)
    return {"bootstrap.servers": bootstrap, **properties_of(bootstrap).librdkafka(), **config}


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
