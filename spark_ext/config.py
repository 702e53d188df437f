"""Typed configuration profiles (TOML in ``conf/`` or any path), validated once at load: a bad
key, type or value is a :class:`ConfigError` naming the setting (docs/design.md invariant 3).

>>> profile = load_profile("test")
>>> profile.spark.shuffle_partitions
2
"""

from __future__ import annotations

import dataclasses
import os
import re
import sys
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from spark_ext.errors import ConfigError
from spark_ext.storage import Location, StorageSettings

if TYPE_CHECKING:
    from spark_ext import kafka_clients

__all__ = [
    "CONF_DIR",
    "KAFKA_MIN_PARTITIONS_CONF",
    "PROJECT_ROOT",
    "KafkaSettings",
    "PathSettings",
    "Profile",
    "SparkSettings",
    "kafka_addresses",
    "load_profile",
    "profile_path",
]


def _conf_dir() -> Path:
    """Where the profiles are: ``$SPARK_EXT_CONF_DIR``; else the checkout's ``conf/``; else the
    copy ``pip install`` puts under ``<prefix>/share/spark_ext/conf``."""
    override = os.environ.get("SPARK_EXT_CONF_DIR")
    if override:
        return Path(override).resolve()
    checkout = Path(__file__).resolve().parent.parent / "conf"
    if checkout.is_dir():
        return checkout
    return Path(sys.prefix) / "share" / "spark_ext" / "conf"


#: The folder of the named profiles (``conf/<name>.toml``).
CONF_DIR = _conf_dir()
#: What a relative ``paths.data_root`` is under (none: the working folder of an installation).
PROJECT_ROOT = CONF_DIR.parent if (CONF_DIR.parent / "spark_ext").is_dir() else None

#: ``${env:NAME}`` in a ``[kafka.properties]`` value (Kafka's EnvVarConfigProvider form).
_ENV_REFERENCE = re.compile(r"\$\{env:([A-Za-z_][A-Za-z0-9_]*)\}")

#: A session setting (a profile's ``[spark.conf]``): the Kafka source's ``minPartitions``.
KAFKA_MIN_PARTITIONS_CONF = "spark.spark_ext.kafka.minPartitions"


def _state_store(provider: str, changelog: bool) -> dict[str, str]:
    """Every store sets the same keys, so applying one replaces the previous one (the
    changelog flag too, which only RocksDB reads)."""
    return {
        "spark.sql.streaming.stateStore.providerClass": (
            f"org.apache.spark.sql.execution.streaming.state.{provider}StateStoreProvider"
        ),
        "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled": str(
            changelog
        ).lower(),
        "spark.sql.streaming.stateStore.minDeltasForSnapshot": "10",
        "spark.sql.streaming.stateStore.maintenanceInterval": "60s",
    }


#: State store providers selectable by name (README, "State store").
STATE_STORES: dict[str, dict[str, str]] = {
    "hdfs": _state_store("HDFSBacked", changelog=False),
    "rocksdb": _state_store("RocksDB", changelog=False),
    "rocksdb_changelog": _state_store("RocksDB", changelog=True),
}


def kafka_addresses(bootstrap: str) -> list[tuple[str, int]]:
    """The ``(host, port)`` of each server of ``bootstrap`` (else ``ConfigError``)."""
    found = []
    for server in bootstrap.split(","):
        host, _, port = server.strip().rpartition(":")
        if not host or not port.isdigit():
            raise ConfigError("kafka.bootstrap_servers", f"{server!r} is not host:port")
        found.append((host.strip("[]"), int(port)))
    return found


@dataclass(frozen=True)
class SparkSettings:
    """How the SparkSession is built."""

    master: str = "local[2]"
    app_name: str = "spark_ext"
    shuffle_partitions: int = 2
    ui_enabled: bool = False
    driver_memory: str = "2g"
    java_options: str = "-XX:+UseSerialGC -XX:TieredStopAtLevel=1"  # fast small local runs
    class_archive: bool = True  # the driver JVM starts from jvm.class_archive() if made
    state_store: str = "rocksdb_changelog"  # one of STATE_STORES
    conf: Mapping[str, str] = field(default_factory=dict)  # further spark.* settings, as they are


@dataclass(frozen=True)
class KafkaSettings:
    """Where the Kafka brokers are, and their clients' properties (``[kafka.properties]``;
    docs/design.md, "Kafka clients")."""

    bootstrap_servers: str = "127.0.0.1:9092"
    properties: Mapping[str, str] = field(default_factory=dict, repr=False)

    def client_properties(self) -> kafka_clients.KafkaProperties:
        """:attr:`properties` with ``${env:NAME}`` replaced, validated (else ``ConfigError``)."""
        resolved = {}
        for key, value in self.properties.items():

            def env(found: re.Match[str], key: str = key) -> str:
                name = found.group(1)
                if name not in os.environ:
                    raise ConfigError(f"kafka.properties.{key}", f"${{env:{name}}} is not set")
                return os.environ[name]

            resolved[key] = _ENV_REFERENCE.sub(env, value)
        from spark_ext import kafka_clients

        return kafka_clients.KafkaProperties(resolved)

    def configure_clients(self, bootstrap: str | None = None) -> str:
        """:func:`spark_ext.kafka_clients.configure` ``bootstrap`` (default: this section's)
        with the client properties; returns it."""
        from spark_ext import kafka_clients

        bootstrap = bootstrap or self.bootstrap_servers
        kafka_clients.configure(bootstrap, self.client_properties())
        return bootstrap


@dataclass(frozen=True)
class PathSettings:
    """Where jobs keep tables and checkpoints: a local folder or an object-store URI."""

    data_root: str = "var/data"

    def resolved_data_root(self) -> Path:
        root = Path(self.data_root)
        return root if root.is_absolute() else (PROJECT_ROOT or Path.cwd()) / root

    def data_root_uri(self) -> str:
        """The data root as Spark names it: the URI as it is, or the resolved local folder."""
        return self.data_root if "://" in self.data_root else str(self.resolved_data_root())


@dataclass(frozen=True)
class Profile:
    """A whole configuration profile."""

    name: str
    spark: SparkSettings = field(default_factory=SparkSettings)
    kafka: KafkaSettings = field(default_factory=KafkaSettings)
    paths: PathSettings = field(default_factory=PathSettings)
    storage: StorageSettings = field(default_factory=StorageSettings)

    def __post_init__(self) -> None:
        """Check what types alone do not: ranges, names, formats."""
        s = self.spark
        if s.shuffle_partitions < 1:
            raise ConfigError(
                "spark.shuffle_partitions", f"must be >= 1, got {s.shuffle_partitions}"
            )
        if s.state_store not in STATE_STORES:
            raise ConfigError(
                "spark.state_store", f"{s.state_store!r} is not one of {sorted(STATE_STORES)}"
            )
        if not s.master:
            raise ConfigError("spark.master", "must not be empty")
        if "://" in self.paths.data_root:
            try:
                Location.parse(self.paths.data_root)
            except ConfigError as exc:  # a scheme the storage layer cannot reach
                raise ConfigError("paths.data_root", str(exc)) from None
        for key in s.conf:
            if not key.startswith("spark."):
                raise ConfigError(f"spark.conf.{key}", "Spark settings start with 'spark.'")
        kafka_addresses(self.kafka.bootstrap_servers)
        self.kafka.client_properties()


def _build(cls: type, section: str, raw: Mapping[str, Any]) -> Any:
    if not isinstance(raw, Mapping):
        raise ConfigError(section, f"must be a table, got {type(raw).__name__}")
    fields = {f.name: f for f in dataclasses.fields(cls)}
    for key in raw:
        if key not in fields:
            known = ", ".join(sorted(fields))
            raise ConfigError(f"{section}.{key}", f"unknown setting (known: {known})")
    values: dict[str, Any] = {}
    for key, value in raw.items():
        default, setting = getattr(cls(), key), f"{section}.{key}"
        if isinstance(default, Mapping):
            if not isinstance(value, Mapping):
                raise ConfigError(setting, "must be a table of strings")
            value = {str(k): _scalar_str(f"{setting}.{k}", v) for k, v in value.items()}
        elif isinstance(default, bool) != isinstance(value, bool) or not isinstance(
            value, type(default)
        ):
            kind = {bool: "true or false", int: "an integer"}.get(type(default), "a string")
            raise ConfigError(setting, f"must be {kind}, got {value!r}")
        values[key] = value
    return cls(**values)


def _scalar_str(setting: str, value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float, str)):
        return str(value)
    raise ConfigError(setting, f"must be a string, number or boolean, got {value!r}")


def profile_path(name_or_path: str | Path) -> Path:
    """The file of a profile: a ``.toml`` path as it is, else ``conf/<name>.toml``."""
    path = Path(name_or_path)
    return path if path.suffix == ".toml" else CONF_DIR / f"{name_or_path}.toml"


def load_profile(name_or_path: str | Path, **overrides: Any) -> Profile:
    """Load and validate a profile by name (``conf/<name>.toml``) or path; ``overrides`` replace
    settings of a section (``load_profile("test", spark={"state_store": "hdfs"})``)."""
    path = profile_path(name_or_path)
    if not path.exists():
        known = ", ".join(sorted(p.stem for p in CONF_DIR.glob("*.toml")))
        raise ConfigError("profile", f"no profile {str(name_or_path)!r} (known: {known})")
    try:
        raw = tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError("profile", f"{path} is not valid TOML: {exc}") from exc
    for section, values in overrides.items():
        merged = dict(raw.get(section, {}))
        merged.update(values)
        raw[section] = merged
    sections = {
        "spark": SparkSettings,
        "kafka": KafkaSettings,
        "paths": PathSettings,
        "storage": StorageSettings,
    }
    for key in raw:
        if key not in sections:
            raise ConfigError(key, f"unknown section (known: {', '.join(sections)})")
    built = {key: _build(cls, key, raw.get(key, {})) for key, cls in sections.items()}
    return Profile(name=path.stem, **built)
