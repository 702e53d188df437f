"""The Kafka tracking agent: its log, snapshots and end events in three Kafka topics.

The topics, the one-transaction write (steps 1-6) and what a kill at each step leaves:
docs/design.md, "Tracker".
"""

from __future__ import annotations

import json
import logging
import re
import threading
import time
from collections.abc import Iterator, Sequence
from typing import Any

from spark_ext import kafka_clients
from spark_ext.crash import declare
from spark_ext.kafka_clients import admin, create_topic, producer
from spark_ext.tracker.agent import Build, EndEvent, TrackerState, TrackingAgent
from spark_ext.tracker.errors import ConfigError, TrackerLogCorrupt, TrackerUnavailable
from spark_ext.tracker.kafka_records import (
    READ_TIMEOUT_S,
    PartBuffer,
    TopicReader,
    chunk_records,
    decode,
    last_record,
    newest_snapshot,
    split_record,
)
from spark_ext.tracker.state import replay_record

__all__ = ["AFTER_COMMIT", "BEFORE_COMMIT", "BEFORE_SEND", "KafkaEndLog", "KafkaTrackingAgent"]

log = logging.getLogger(__name__)

BEFORE_SEND = declare("tracker.agent.before_send", "driver", "transaction begun, nothing sent")
BEFORE_COMMIT = declare("tracker.agent.before_commit", "driver", "log and ends sent, not committed")
AFTER_COMMIT = declare("tracker.agent.after_commit", "driver", "log and ends committed")

#: Attempts of a failed transaction (fenced, broker unreachable) before giving up.
ATTEMPTS = 4


class KafkaEndLog:
    """Reads a Kafka agent's end events by sequence number (the tracker source uses it)."""

    _shared: dict[tuple[str, str], KafkaEndLog] = {}
    _shared_lock = threading.Lock()

    def __init__(self, bootstrap: str, topic: str) -> None:
        self.bootstrap = bootstrap
        self.topic = topic
        self._reader = TopicReader(bootstrap, topic)
        self._lock = threading.Lock()

    @classmethod
    def shared(cls, bootstrap: str, topic: str) -> KafkaEndLog:
        """The process's reader of ``topic`` (created on first use, then kept)."""
        with cls._shared_lock:
            found = cls._shared.get((bootstrap, topic))
            if found is None:
                found = cls._shared[(bootstrap, topic)] = cls(bootstrap, topic)
            return found

    def _event(self, offset: int, value: bytes) -> EndEvent:
        return EndEvent.from_list(decode(self.topic, offset, value))

    def end_offset(self) -> int:
        """The topic's end offset as ``read_committed`` readers see it (the next offset)."""
        with self._lock:
            return self._reader.end()

    def last_seq(self) -> int:
        """The sequence number of the newest committed end event (0 for none)."""
        with self._lock:
            found = last_record(self._reader)
        return 0 if found is None else self._event(*found).seq

    def events(self, after_seq: int, up_to_seq: int) -> Iterator[EndEvent]:
        """End events with ``after_seq < seq <= up_to_seq``, in order."""
        if up_to_seq <= after_seq:
            return
        with self._lock:
            out = []  # seq ``s`` sits at offset ``>= s - 1`` (docs/design.md, "Tracker")
            for offset, value in self._reader.read(after_seq, self._reader.end()):
                e = self._event(offset, value)
                if e.seq > up_to_seq:
                    break
                if e.seq > after_seq:
                    out.append(e)
                if e.seq == up_to_seq:
                    break
        if out and out[-1].seq != up_to_seq:
            raise TrackerLogCorrupt(
                f"{self.topic}: end events up to seq {up_to_seq} expected, last is {out[-1].seq}"
            )
        yield from out

    def close(self) -> None:
        self._reader.close()


class KafkaTrackingAgent(TrackingAgent):
    """The agent whose log, snapshots and end events live in Kafka; ``name`` names its topics
    and transactional id (every query sharing the agent uses it)."""

    def __init__(
        self,
        bootstrap: str,
        name: str,
        snapshot_every: int | None = None,
        snapshot_bytes: int | None = None,
    ) -> None:
        super().__init__(snapshot_every, snapshot_bytes)
        if not re.fullmatch(r"[A-Za-z0-9._-]+", name):
            raise ConfigError(
                "KafkaTrackingAgent.name", f"letters, digits, '.', '_', '-' only, got {name!r}"
            )
        self.bootstrap, self.name = bootstrap, name
        self.transactional_id = f"spark_ext.tracker.{name}"
        self.log_topic, self.ends_topic, self.snapshot_topic = (
            f"{self.transactional_id}.{t}" for t in ("log", "ends", "snapshot")
        )
        self._create_topics()
        self._lock = threading.RLock()
        self._stale = True  # the state must be (re)loaded before use
        self._position = 0  # next log offset not yet folded into the state
        self._own_marker = False  # the offset at our position is our own commit marker
        self._snap_last: int | None = None  # offset of the newest snapshot's last chunk
        self._snap_slot = 1  # its key slot (the next snapshot takes the other)
        self._snap_position = 0  # the log position the newest snapshot covers
        self._reader = TopicReader(bootstrap, self.log_topic)
        self._parts = PartBuffer()  # a log record cut in parts, until its last is read
        self._end_log = KafkaEndLog(bootstrap, self.ends_topic)
        self._snap_reader = TopicReader(bootstrap, self.snapshot_topic)
        self._producer: Any = None
        with self._lock:
            self._start_producer()
            self._catch_up()

    # -- Kafka plumbing ----------------------------------------------------------------------
    def _create_topics(self) -> None:
        try:
            for topic in (self.log_topic, self.ends_topic):
                create_topic(self.bootstrap, topic, 1, **{"retention.ms": "-1"})
            create_topic(self.bootstrap, self.snapshot_topic, 1, **{"cleanup.policy": "compact"})
        except Exception as e:
            raise TrackerUnavailable(f"cannot create the tracker topics: {e}") from e

    def _start_producer(self) -> None:
        """A new transactional producer; ``init_transactions`` fences older instances."""
        self._close_producer()
        try:
            self._producer = producer(
                self.bootstrap,
                transactional_id=self.transactional_id,
                acks="all",
                linger_ms=0,
            )
            self._producer.init_transactions()
        except Exception as e:
            self._close_producer()
            raise TrackerUnavailable(f"cannot start the tracker's producer: {e}") from e

    def _close_producer(self) -> None:
        if self._producer is not None:
            try:
                self._producer.close(timeout=5)
            except Exception:  # a fenced producer may fail to close cleanly
                log.debug("closing a failed tracker producer", exc_info=True)
            self._producer = None

    def _locked(self) -> threading.RLock:
        return self._lock

    def _load(self) -> None:
        """The state from the newest snapshot (none: empty) and the log records after it."""
        self._own_marker = False
        found = newest_snapshot(self._snap_reader)
        if found is None:
            if self._reader.start() > 0:  # trimmed below a snapshot that is now missing
                raise TrackerLogCorrupt(
                    f"{self.log_topic} starts at offset {self._reader.start()} but "
                    f"{self.snapshot_topic} holds no whole snapshot"
                )
            self._state, self._position, snap_bytes = TrackerState(), 0, 0
            self._snap_last, self._snap_slot, self._snap_position = None, 1, 0
        else:
            body, header, last = found
            self._state = TrackerState.from_dict(body)
            self._position = self._snap_position = int(header["log_offset"])
            self._snap_last, self._snap_slot = last, int(header["slot"])
            snap_bytes = int(header["bytes"])
        self._since_records = self._since_bytes = 0
        self._stale = False
        self._parts.clear()
        self._catch_up()
        self._loaded(snap_bytes)

    def _catch_up(self) -> None:
        """Fold records committed since our position (by another instance) into the state."""
        if self._stale:
            self._load()
            return
        end = self._reader.end()
        if self._own_marker and end == self._position + 1:
            # Only our last transaction's commit marker lies ahead: reading it would poll
            # for a record that never comes (the fetch wait, ~0.2 s a batch).
            self._position = end
        self._own_marker = False
        for offset, value in self._reader.read(self._position, end):
            self._position = offset + 1
            self._since_bytes += len(value)
            where = f"{self.log_topic} at offset {offset}"
            record = self._parts.add(decode(self.log_topic, offset, value), where)
            if record is not None:  # whole (the last of its parts, or never cut)
                replay_record(self._state, record)
                self._since_records += 1  # a record, as _transact counts it, not a part
        self._position = max(self._position, end)

    def _trim_log(self, below: int) -> None:
        """Delete log records below ``below`` (the previous snapshot's position)."""
        from kafka import TopicPartition

        if below <= 0:
            return
        try:
            with admin(self.bootstrap) as client:
                client.delete_records({TopicPartition(self.log_topic, 0): below})
        except Exception as e:  # nothing is lost: the records stay until the next trim
            log.warning("tracker %s: log not trimmed below %d: %s", self.name, below, e)

    def _write(
        self, record: dict[str, Any], ends: Sequence[EndEvent], batch: int | None
    ) -> int | None:
        """Steps 4-6: send, commit and adopt the state; the last end event's offset (or None)."""
        p = self._producer
        p.begin_transaction()
        BEFORE_SEND.reached(batch)
        body = json.dumps(record, sort_keys=True, separators=(",", ":"))
        # above Kafka's record size in parts, all in this transaction (kafka_records)
        sent = [p.send(self.log_topic, value=v, partition=0) for v in split_record(body)]
        snapshot = self._snapshot_due(1, len(body))
        end_futures = [
            p.send(
                self.ends_topic,
                key=e.substream.encode(),
                value=json.dumps(e.to_list(), separators=(",", ":")).encode(),
                partition=0,
            )
            for e in ends
        ]
        p.flush()
        # every future, not just the last (docs/design.md, "Tracker": KAFKA-5385)
        offset = [f.get(timeout=READ_TIMEOUT_S).offset for f in sent][-1]  # the last part
        end_offsets = [f.get(timeout=READ_TIMEOUT_S).offset for f in end_futures]
        written = None  # the snapshot's (last chunk's offset, slot, log position)
        if snapshot:  # the state after this record, in the same transaction
            slot = 1 - self._snap_slot
            chunks = chunk_records(self._state.to_dict(), offset + 1, slot, self._snap_last)
            futures = [p.send(self.snapshot_topic, key=k, value=v, partition=0) for k, v in chunks]
            p.flush()
            written = (
                [f.get(timeout=READ_TIMEOUT_S).offset for f in futures][-1],
                slot,
                offset + 1,
            )
        BEFORE_COMMIT.reached(batch)
        p.commit_transaction()
        AFTER_COMMIT.reached(batch)
        # 6. committed: the state is the one the record describes, past the record
        self._stale = False
        self._position = offset + 1
        self._own_marker = True  # at ``offset + 1``: the log record is the only one
        self._since_records += 1
        self._since_bytes += len(body)
        if written is not None:
            previous = self._snap_position
            self._snap_last, self._snap_slot, self._snap_position = written
            self._since_records = self._since_bytes = 0
            self._trim_log(previous)  # keep the records after the previous snapshot
        return end_offsets[-1] if end_offsets else None

    def _await_visible(self, offset: int) -> None:
        """Wait until ``read_committed`` readers of the ends topic see ``offset``."""
        deadline = time.monotonic() + READ_TIMEOUT_S
        while self._end_log.end_offset() <= offset:
            if time.monotonic() > deadline:
                raise TrackerUnavailable(f"end events at offset {offset} not visible in time")
            time.sleep(0.01)

    def _transact(self, build: Build, batch: int | None) -> list[EndEvent]:
        """Steps 1-6, retried on Kafka's failures (``ATTEMPTS``)."""
        from kafka.errors import KafkaError

        last: Exception | None = None
        with self._lock:
            for attempt in range(ATTEMPTS):
                try:
                    if self._producer is None:
                        self._start_producer()  # 1.
                    self._catch_up()  # 2.
                    self._stale = True  # until committed: build mutates the state
                    built = build(self._state)  # 3.
                    if built is None:
                        self._stale = False  # nothing accepted, nothing changed
                        return []
                    record, ends = built
                    end_offset = self._write(record, ends, batch)  # 4.-6.
                except TrackerUnavailable as e:
                    last = e
                    continue
                except KafkaError as e:  # fenced, timed out, broker gone: settled by step 1
                    last = e
                    log.warning("tracker transaction failed (attempt %d): %s", attempt + 1, e)
                    self._close_producer()
                    continue
                if end_offset is not None:
                    self._await_visible(end_offset)
                return ends
            raise TrackerUnavailable(
                f"tracker {self.name}: no transaction after {ATTEMPTS} attempts: {last}"
            ) from last

    # -- TrackingAgent -----------------------------------------------------------------------
    def source_options(self) -> dict[str, str]:
        options = {"agent": "kafka", "bootstrap": self.bootstrap, "ends_topic": self.ends_topic}
        return {**options, **kafka_clients.access(self.bootstrap).options()}

    def _read_ends(self, after_seq: int, up_to_seq: int) -> list[EndEvent]:
        return list(self._end_log.events(after_seq, up_to_seq))

    def close(self) -> None:
        """Release the producer and readers (the agent's data stays in Kafka)."""
        with self._lock:
            self._close_producer()
            self._reader.close()
            self._end_log.close()
            self._snap_reader.close()
