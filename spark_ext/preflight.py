"""Checks a job makes before it starts a query, each a typed error naming cause and fix in
seconds, where Spark would fail after minutes or not at all (docs/design.md, "A job that
talks").

>>> require_brokers("127.0.0.1:9092")                          # doctest: +SKIP
>>> require_topics("127.0.0.1:9092", ["events"])               # doctest: +SKIP
>>> require_checkpoint_reads("var/data/eo/_checkpoint", ["events"])  # doctest: +SKIP
>>> require_table_folder("var/data/eo/events")                 # doctest: +SKIP
"""

from __future__ import annotations

import socket
import time
from collections.abc import Iterable
from pathlib import Path

from spark_ext import kafka_clients, storage
from spark_ext.config import kafka_addresses
from spark_ext.errors import BrokerUnreachableError, CheckpointMismatchError
from spark_ext.metrics import kafka_offsets
from spark_ext.sinks.delta_txn import check_target_path
from spark_ext.sinks.errors import TopicMissingError

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


def require_brokers(bootstrap: str, wait_s: float = BROKER_WAIT_S) -> None:
    """:class:`~spark_ext.errors.BrokerUnreachableError` unless a server of ``bootstrap``
    accepts a TCP connection within ``wait_s`` seconds (retried every half second)."""
    deadline = time.monotonic() + wait_s
    while True:
        for address in kafka_addresses(bootstrap):
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
    """The sorted Kafka topics of each offset-log entry of ``checkpoint`` a restart reads (the
    newest committed batch's, or the oldest, and every newer one); empty for a new checkpoint."""
    root = storage.Location.parse(checkpoint)
    offsets = root.join("offsets")
    batches = sorted(int(n) for n in storage.list_prefix(offsets) if n.isdigit())
    commits = [int(n) for n in storage.list_prefix(root.join("commits")) if n.isdigit()]
    since = max((b for b in commits if b in batches), default=batches[0] if batches else 0)
    found = []
    for batch in (b for b in batches if b >= since):
        topics: set[str] = set()
        entry = storage.read_bytes(offsets.join(str(batch))).decode().splitlines()
        for line in entry[2:]:  # "v1", the batch's metadata, then one line per source
            topics.update(kafka_offsets(line) or {})
        found.append(sorted(topics))
    return found


def require_checkpoint_reads(
    checkpoint: str | Path | storage.Location, topics: Iterable[str]
) -> None:
    """:class:`~spark_ext.errors.CheckpointMismatchError` when an entry of
    :func:`checkpoint_topics` lacks one of ``topics`` (docs/design.md, "A job that talks")."""
    wanted = sorted(set(topics))
    for recorded in checkpoint_topics(checkpoint):
        if not set(wanted) <= set(recorded):
            raise CheckpointMismatchError(str(checkpoint), recorded, wanted)


def require_table_folder(table: str | Path | storage.Location) -> None:
    """:func:`spark_ext.sinks.delta_txn.check_target_path` on ``table``: what the Delta sinks
    refuse later, refused at start (docs/design.md, "A job that talks")."""
    check_target_path(str(table))
