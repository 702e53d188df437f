"""Checks a job makes before it starts a query, each a typed error naming cause and fix in
seconds, where Spark would fail after minutes or not at all (docs/design.md, "A job that
talks").

>>> require_brokers("127.0.0.1:9092")                          # doctest: +SKIP
>>> require_topics("127.0.0.1:9092", ["events"])               # doctest: +SKIP
>>> require_checkpoint_reads("var/data/eo/_checkpoint", ["events"])  # doctest: +SKIP
>>> require_table_folder("var/data/eo/events")                 # doctest: +SKIP
"""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Iterable
from pathlib import Path

from spark_ext import kafka_clients, storage
from spark_ext.errors import BrokerUnreachableError, CheckpointMismatchError
from spark_ext.sinks.errors import DeltaTargetPathError, TopicMissingError

__all__ = [
    "BROKER_WAIT_S",
    "checkpoint_topics",
    "require_brokers",
    "require_checkpoint_reads",
    "require_table_folder",
    "require_topics",
]

#: How long :func:`require_brokers` waits for a broker that refuses or does not answer.
BROKER_WAIT_S = 10.0


def _addresses(bootstrap: str) -> list[tuple[str, int]]:
    out = []
    for server in bootstrap.split(","):
        host, _, port = server.strip().rpartition(":")
        out.append((host.strip("[]") or "localhost", int(port or 9092)))
    return out


def require_brokers(bootstrap: str, wait_s: float = BROKER_WAIT_S) -> None:
    """:class:`~spark_ext.errors.BrokerUnreachableError` unless a server of ``bootstrap``
    accepts a TCP connection within ``wait_s`` seconds (retried every half second)."""
    deadline = time.monotonic() + wait_s
    while True:
        for address in _addresses(bootstrap):
            left = max(0.1, deadline - time.monotonic())
            try:
                socket.create_connection(address, timeout=min(left, 3.0)).close()
                return
            except OSError:
                continue
        if time.monotonic() >= deadline:
            raise BrokerUnreachableError(bootstrap, wait_s)
        time.sleep(0.5)


def require_topics(bootstrap: str, topics: Iterable[str]) -> None:
    """:class:`~spark_ext.sinks.errors.TopicMissingError` naming the first input topic of
    ``topics`` the cluster does not have (a metadata request: no topic is auto-created)."""
    with kafka_clients.admin(bootstrap, request_timeout_ms=10_000) as admin:
        known = set(admin.list_topics())
    for topic in topics:
        if topic not in known:
            raise TopicMissingError(topic, "input").with_fix(
                "create it, or pass --topic with an existing one (--bootstrap: another cluster)"
            )


def checkpoint_topics(checkpoint: str | Path | storage.Location) -> list[list[str]]:
    """The Kafka topics of each entry of ``checkpoint``'s offset log a restart reads: the
    newest committed batch's (or the oldest, none committed) and every newer one, each
    sorted; empty for a new checkpoint. An entry is ``v1``, the batch's metadata, then one
    line per source: a Kafka source's is ``{"topic": {"partition": offset}}`` (another
    source's line is left out)."""
    root = storage.Location.parse(checkpoint)
    offsets = root.join("offsets")
    batches = sorted(int(n) for n in storage.list_prefix(offsets) if n.isdigit())
    commits = [int(n) for n in storage.list_prefix(root.join("commits")) if n.isdigit()]
    since = max((b for b in commits if b in batches), default=batches[0] if batches else 0)
    found = []
    for batch in (b for b in batches if b >= since):
        topics: set[str] = set()
        for line in storage.read_bytes(offsets.join(str(batch))).decode().splitlines()[2:]:
            try:
                source = json.loads(line)
            except ValueError:
                continue
            if isinstance(source, dict) and all(_partition_offsets(v) for v in source.values()):
                topics.update(source)
        found.append(sorted(topics))
    return found


def _partition_offsets(value: object) -> bool:
    """Whether ``value`` is a Kafka source's offsets of one topic: ``{"0": 5, "1": 7}``."""
    return isinstance(value, dict) and all(
        isinstance(k, str) and k.isdigit() and isinstance(o, int) for k, o in value.items()
    )


def require_checkpoint_reads(
    checkpoint: str | Path | storage.Location, topics: Iterable[str]
) -> None:
    """:class:`~spark_ext.errors.CheckpointMismatchError` when an entry a restart reads from
    ``checkpoint``'s offset log (:func:`checkpoint_topics`) does not name each of ``topics``
    (a new checkpoint passes; the query may read more). Spark allows no other topics on a
    restart: it would report their partitions as lost."""
    wanted = sorted(set(topics))
    for recorded in checkpoint_topics(checkpoint):
        if not set(wanted) <= set(recorded):
            raise CheckpointMismatchError(str(checkpoint), recorded, wanted)


def require_table_folder(table: str | Path | storage.Location) -> None:
    """:class:`~spark_ext.sinks.errors.DeltaTargetPathError` when ``table`` is a file, or a
    folder with files and no ``_delta_log``, on any storage (what the Delta sinks refuse
    later, docs/design.md, "Delta sinks")."""
    import pyarrow.fs as pafs

    location = storage.Location.parse(table)
    fs, path = storage.filesystem(location)
    kind = fs.get_file_info(path).type
    if kind == pafs.FileType.File:
        raise DeltaTargetPathError(str(location), "is a file, not a Delta table folder")
    if kind == pafs.FileType.NotFound or storage.exists(location.join("_delta_log")):
        return
    files = storage.list_prefix(location)
    if files:
        raise DeltaTargetPathError(
            str(location), f"holds {len(files)} file(s) ({files[0]}, ...) but no _delta_log"
        )
