"""What both Kafka sinks share: the column contract, producer settings, topic checks."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.types import BinaryType, IntegerType, StringType, StructType

from connectors.kafka.digest import as_binary
from spark_ext import kafka_clients
from spark_ext.sinks.errors import ClientStalledError, SinkConfigError, TopicMissingError

log = logging.getLogger(__name__)

__all__ = [
    "LINGER_MS",
    "PRODUCER",
    "RECORD_ID_COLUMN",
    "RECORD_ID_HEADER",
    "STALL_GRACE_S",
    "NamedRows",
    "RecordColumns",
    "arrow_columns",
    "arrow_rows",
    "bounded",
    "call_timeout_s",
    "check_columns",
    "client_deadline_s",
    "existing_topics",
    "require_topic",
]

RECORD_ID_HEADER = "spark_ext.record_id"
RECORD_ID_COLUMN = "record_id"
LINGER_MS = 20
#: Producer settings of both sinks (throughput without giving up ordering or acks).
PRODUCER: dict[str, Any] = {
    "acks": "all",
    "linger_ms": LINGER_MS,
    "batch_size": 512 * 1024,
    "enable_idempotence": True,
}

#: How much longer than a call's own timeout :func:`bounded` waits before giving it up.
STALL_GRACE_S = 5.0


def call_timeout_s(delivery_timeout_ms: int) -> float:
    """A client call's timeout: at least 30 s and 5 s over the delivery timeout."""
    return max(30.0, delivery_timeout_ms / 1000 + 5)


def client_deadline_s(delivery_timeout_ms: int) -> float:
    """When :func:`bounded` gives up a call of :func:`call_timeout_s`."""
    return call_timeout_s(delivery_timeout_ms) + STALL_GRACE_S


def bounded(call: Callable[[], object], what: str, timeout_s: float) -> None:
    """Run ``call`` in a thread of its own; :class:`ClientStalledError` if it has not returned
    ``timeout_s`` later (the caller drops the client: docs/design.md, "Kafka sinks")."""
    outcome: list[BaseException | None] = []
    done = threading.Event()

    def run() -> None:
        try:
            call()
            outcome.append(None)
        except BaseException as exc:  # handed to the caller's thread below
            outcome.append(exc)
        finally:
            done.set()

    threading.Thread(target=run, name=f"spark-ext: {what}", daemon=True).start()
    if not done.wait(timeout_s):
        raise ClientStalledError(what, timeout_s)
    if outcome[0] is not None:
        raise outcome[0]


def check_columns(schema: StructType, require_record_id: bool = False) -> None:
    """Check the columns a Kafka sink takes: ``value`` (string/binary), optional ``key``,
    ``partition`` (int) and ``record_id`` (string; ``require_record_id``)."""
    types = {f.name: f.dataType for f in schema.fields}
    if "value" not in types:
        raise SinkConfigError("df", "a Kafka sink needs a 'value' column")
    extra = sorted(set(types) - {"key", "value", "partition", RECORD_ID_COLUMN})
    if extra:
        raise SinkConfigError(
            "df", f"unexpected columns {extra}: only key, value, partition, {RECORD_ID_COLUMN}"
        )
    for name in ("key", "value"):
        if name in types and not isinstance(types[name], (StringType, BinaryType)):
            raise SinkConfigError(f"df.{name}", f"must be string or binary, not {types[name]}")
    if "partition" in types and not isinstance(types["partition"], IntegerType):
        raise SinkConfigError("df.partition", f"must be int, not {types['partition']}")
    if RECORD_ID_COLUMN in types and not isinstance(types[RECORD_ID_COLUMN], StringType):
        raise SinkConfigError(f"df.{RECORD_ID_COLUMN}", "must be string")
    if require_record_id and RECORD_ID_COLUMN not in types:
        raise SinkConfigError(
            f"df.{RECORD_ID_COLUMN}",
            "the Kafka sinks need a string column naming each row by its input coordinates "
            "(e.g. concat_ws('/', topic, partition, offset)), unique within a batch and the "
            "same when the batch is re-run",
        )


@dataclass(frozen=True)
class RecordColumns:
    """An Arrow record batch's columns as lists (``None``: absent; keys and values bytes)."""

    values: list[bytes | None]
    keys: list[bytes | None] | None
    partitions: list[int | None] | None
    record_ids: list[str | None] | None


def arrow_columns(batch: pa.RecordBatch, record_ids: bool = True) -> RecordColumns:
    """The columns :func:`check_columns` allows of ``batch`` as lists (converted in Arrow)."""
    names = batch.schema.names

    def column(name: str, binary: bool = False) -> list[Any] | None:
        if name not in names:
            return None
        col = batch.column(name)
        return (as_binary(col) if binary else col).to_pylist()

    return RecordColumns(
        as_binary(batch.column("value")).to_pylist(),
        column("key", binary=True),
        column("partition"),
        column(RECORD_ID_COLUMN) if record_ids else None,
    )


def arrow_rows(
    batch: pa.RecordBatch,
) -> Iterator[tuple[bytes | None, bytes | None, int | None, str | None]]:
    """``(key, value, partition, record_id)`` of every row (absent columns: ``None``)."""
    c = arrow_columns(batch)
    none = [None] * len(c.values)
    return zip(c.keys or none, c.values, c.partitions or none, c.record_ids or none, strict=True)


@dataclass(frozen=True)
class NamedRows:
    """Rows as columns, each with its record id (``names``: the header, a keyless row's key)."""

    values: list[bytes | None]
    keys: list[bytes | None]
    partitions: list[int | None] | None
    names: list[bytes]

    @classmethod
    def of(cls, batch: pa.RecordBatch, prefix: bytes, id_as_key: bool = True) -> NamedRows:
        """The rows of ``batch`` with ids ``prefix + record_id`` (a null id is a
        :class:`SinkConfigError`); ``id_as_key``: a row without a key gets its id as key."""
        ids = batch.column(RECORD_ID_COLUMN)
        if ids.null_count:
            raise SinkConfigError(f"df.{RECORD_ID_COLUMN}", "is null in a row")
        empty = pa.scalar(b"", pa.large_binary())
        named = pc.binary_join_element_wise(
            pa.scalar(prefix, pa.large_binary()), ids.cast(pa.large_binary()), empty
        )
        rows = arrow_columns(batch, record_ids=False)
        if not id_as_key:
            keys: list[bytes | None] = rows.keys or [None] * batch.num_rows
            return cls(rows.values, keys, rows.partitions, named.to_pylist())
        keyed = named
        if "key" in batch.schema.names:
            keyed = pc.coalesce(batch.column("key").cast(pa.large_binary()), named)
        return cls(rows.values, keyed.to_pylist(), rows.partitions, named.to_pylist())

    def without(self, names: set[bytes]) -> NamedRows:
        """The rows whose record id is not in ``names``."""
        keep = [i for i, n in enumerate(self.names) if n not in names]
        return self if len(keep) == len(self.names) else self._rows(keep)

    def _rows(self, rows: Sequence[int]) -> NamedRows:
        parts = self.partitions
        return NamedRows(
            [self.values[i] for i in rows],
            [self.keys[i] for i in rows],
            None if parts is None else [parts[i] for i in rows],
            [self.names[i] for i in rows],
        )

    def head(self) -> NamedRows:
        return self._rows(range(1))

    def tail(self) -> NamedRows:
        return self._rows(range(1, len(self.names)))


def existing_topics(bootstrap: str) -> set[str]:
    """Names of the cluster's topics (a metadata request that never auto-creates a topic)."""
    with kafka_clients.admin(bootstrap) as admin:
        return set(admin.list_topics())


def require_topic(bootstrap: str, topic: str) -> None:
    """:class:`TopicMissingError` naming the output ``topic`` unless it exists (at start-up)."""
    if topic not in existing_topics(bootstrap):
        raise TopicMissingError(topic, "output")
