"""The Kafka tracking agent: its log and its end events kept in two Kafka topics.

For queries on many machines (or a downstream query on another cluster) the agent's log
cannot be a local file. :class:`KafkaTrackingAgent` keeps the same log records as
:class:`~spark_ext.tracker.agent.LocalTrackingAgent` in Kafka:

``spark_ext.tracker.<name>.log``
    One partition; one record per declaration and per applied batch of reports (the
    reports accepted *and* the end events they caused). The agent's state is rebuilt from
    it. An ordinary (not compacted) topic with unlimited retention: every record is needed.
``spark_ext.tracker.<name>.ends``
    One partition; one record per end event ``[seq, substream, start_ms, end_ms]``, keyed by
    the substream. This is what the ``spark_ext_tracker`` source reads
    (:class:`KafkaEndLog`); a record with sequence number ``s`` sits at offset ``>= s - 1``
    (transaction markers take offsets too), so a read of ``(after, up_to]`` starts at
    offset ``after`` and never scans the topic from the beginning.

Every write is ONE Kafka transaction (``transactional.id = spark_ext.tracker.<name>``) over
both topics, and both topics are read ``read_committed``. Applying reports:

1. ``init_transactions`` (when the producer is new): fences any other live instance of this
   agent and aborts the transaction a killed instance left open;
2. catch up: read the log from the agent's position to its last stable offset;
3. drop reports whose key was applied (per ``(query, stage, partition)`` the highest batch),
   fold the rest into a copy of the state and compute the end events they cause;
4. in one transaction send the log record and every end event   -- crash point
   ``tracker.agent.before_send`` / ``tracker.agent.before_commit``;
5. commit it                                                   -- crash point
   ``tracker.agent.after_commit``; then wait until the end events are readable
   (``read_committed`` readers see them only once the commit markers are written);
6. adopt the new state and return the end events.

A kill before step 5 leaves an open transaction that the next instance's step 1 aborts:
no reader ever saw its records, and the sender re-sends (the micro-batch is replayed). A kill
after step 5 means a re-sent report is a duplicate in step 3: no end event is published
twice. Two live instances serialise through fencing: a fenced instance's transaction fails,
it re-initialises (fencing the other in turn), catches up and retries, so its state always
includes every committed record before it writes.

Example
-------
>>> agent = KafkaTrackingAgent("127.0.0.1:9092", "orders")                # doctest: +SKIP
>>> agent.declare("counts", sources=["events:0", "events:1"])             # doctest: +SKIP
>>> agent.apply(reports)       # -> [EndEvent(seq=1, substream='counts/0/10000', ...)]  # doctest: +SKIP
"""

from __future__ import annotations

import copy
import json
import logging
import re
import threading
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from spark_ext.crash import declare
from spark_ext.kafka_admin import create_topic
from spark_ext.tracker.agent import (
    EndEvent,
    TrackerFigures,
    TrackerState,
    TrackingAgent,
    apply_record,
    declare_record,
    replay_record,
)
from spark_ext.tracker.errors import ConfigError, TrackerLogCorrupt, TrackerUnavailable
from spark_ext.tracker.reports import Report

log = logging.getLogger(__name__)

#: Fault points of the Kafka agent's write (steps 4-5: one transaction, then its commit).
BEFORE_SEND = declare("tracker.agent.before_send", "driver", "transaction begun, nothing sent")
BEFORE_COMMIT = declare("tracker.agent.before_commit", "driver", "log and ends sent, not committed")
AFTER_COMMIT = declare("tracker.agent.after_commit", "driver", "log and ends committed")

#: How often a failed transaction (fenced, broker unreachable) is retried before giving up.
ATTEMPTS = 4
#: How long a read or a visibility wait may take before the agent is declared unavailable.
READ_TIMEOUT_S = 60.0


@dataclass(frozen=True)
class KafkaAgentTopics:
    """Names of one Kafka agent's topics and transactional id, derived from its name."""

    name: str

    def __post_init__(self) -> None:
        if not re.fullmatch(r"[A-Za-z0-9._-]+", self.name):
            raise ConfigError(
                "KafkaTrackingAgent.name", f"letters, digits, '.', '_', '-' only, got {self.name!r}"
            )

    @property
    def log(self) -> str:
        return f"spark_ext.tracker.{self.name}.log"

    @property
    def ends(self) -> str:
        return f"spark_ext.tracker.{self.name}.ends"

    @property
    def transactional_id(self) -> str:
        return f"spark_ext.tracker.{self.name}"


class _TopicReader:
    """A ``read_committed`` reader of partition 0 of one topic, by offset range."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        from kafka import KafkaConsumer, TopicPartition

        self.topic = topic
        self.tp = TopicPartition(topic, 0)
        try:
            self.consumer = KafkaConsumer(
                bootstrap_servers=bootstrap,
                enable_auto_commit=False,
                group_id=None,
                isolation_level="read_committed",
                auto_offset_reset="earliest",
            )
            self.consumer.assign([self.tp])
        except Exception as e:  # kafka-python raises NoBrokersAvailable and friends
            raise TrackerUnavailable(f"cannot read {topic} at {bootstrap}: {e}") from e

    def end(self) -> int:
        """The last stable offset: records below it are committed (or aborted), none open."""
        try:
            return int(self.consumer.end_offsets([self.tp])[self.tp])
        except Exception as e:
            raise TrackerUnavailable(f"cannot read the end offset of {self.topic}: {e}") from e

    def read(self, start: int, stop: int) -> Iterator[tuple[int, bytes]]:
        """Committed records with ``start <= offset < stop`` as ``(offset, value)``."""
        if start >= stop:
            return
        self.consumer.seek(self.tp, start)
        deadline = time.monotonic() + READ_TIMEOUT_S
        while self.consumer.position(self.tp) < stop:
            if time.monotonic() > deadline:
                raise TrackerUnavailable(f"reading {self.topic} [{start}, {stop}) timed out")
            batch = self.consumer.poll(timeout_ms=200)
            for msg in batch.get(self.tp, []):
                if msg.offset >= stop:
                    return
                yield msg.offset, msg.value

    def close(self) -> None:
        self.consumer.close()


def _decode(topic: str, offset: int, value: bytes) -> Any:
    try:
        return json.loads(value)
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise TrackerLogCorrupt(f"{topic} at offset {offset}: {e}") from e


class KafkaEndLog:
    """Reads a Kafka agent's end events by sequence number (the tracker source uses it).

    One instance per ``(bootstrap, topic)`` and process is enough: :meth:`shared`.
    """

    _shared: dict[tuple[str, str], KafkaEndLog] = {}
    _shared_lock = threading.Lock()

    def __init__(self, bootstrap: str, topic: str) -> None:
        self.bootstrap = bootstrap
        self.topic = topic
        self._reader = _TopicReader(bootstrap, topic)
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
        return EndEvent.from_list(_decode(self.topic, offset, value))

    def last_seq(self) -> int:
        """The sequence number of the newest committed end event (0 for none)."""
        with self._lock:
            end = self._reader.end()
            back = 8
            while True:
                start = max(0, end - back)
                found = [self._event(o, v) for o, v in self._reader.read(start, end)]
                if found:
                    return found[-1].seq
                if start == 0:
                    return 0
                back *= 4  # only markers / aborted records in the tail: look further back

    def events(self, after_seq: int, up_to_seq: int) -> Iterator[EndEvent]:
        """End events with ``after_seq < seq <= up_to_seq``, in order."""
        if up_to_seq <= after_seq:
            return
        with self._lock:
            end = self._reader.end()
            # Sequence numbers start at 1 and every event takes at least one offset, so the
            # event with seq ``after_seq + 1`` sits at offset ``after_seq`` or later.
            out = []
            for offset, value in self._reader.read(after_seq, end):
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
    """The tracking agent whose log and end events live in Kafka (module docstring).

    Parameters
    ----------
    bootstrap
        The Kafka bootstrap servers.
    name
        Names the agent's topics and transactional id; every query sharing the agent (e.g.
        an upstream and a downstream query) uses the same name.
    create_topics
        Create the two topics if they do not exist (one partition each, replication 1).
    """

    def __init__(self, bootstrap: str, name: str, create_topics: bool = True) -> None:
        self.bootstrap = bootstrap
        self.topics = KafkaAgentTopics(name)
        if create_topics:
            self._create_topics()
        self._lock = threading.RLock()
        self._state = TrackerState()
        self._ends: list[EndEvent] = []
        self._position = 0  # next log offset not yet folded into the state
        self._reader = _TopicReader(bootstrap, self.topics.log)
        self._ends_reader = _TopicReader(bootstrap, self.topics.ends)
        self._producer: Any = None
        with self._lock:
            self._start_producer()
            self._catch_up()

    # -- Kafka plumbing ----------------------------------------------------------------------
    def _create_topics(self) -> None:
        try:
            for topic in (self.topics.log, self.topics.ends):
                create_topic(self.bootstrap, topic, 1, **{"retention.ms": "-1"})
        except Exception as e:
            raise TrackerUnavailable(f"cannot create the tracker topics: {e}") from e

    def _start_producer(self) -> None:
        """A new transactional producer; ``init_transactions`` fences older instances."""
        from kafka import KafkaProducer

        self._close_producer()
        try:
            self._producer = KafkaProducer(
                bootstrap_servers=self.bootstrap,
                transactional_id=self.topics.transactional_id,
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

    def _catch_up(self) -> None:
        """Fold records committed since our position (by another instance) into the state."""
        end = self._reader.end()
        for offset, value in self._reader.read(self._position, end):
            self._ends.extend(replay_record(self._state, _decode(self.topics.log, offset, value)))
            self._position = offset + 1
        self._position = max(self._position, end)

    def _write(
        self, record: dict[str, Any], ends: Sequence[EndEvent], batch: int | None
    ) -> tuple[int, int | None]:
        """Steps 4-5: one transaction with the log record and the end events, committed.

        Returns the log record's offset and the last end event's offset (None for none).
        """
        p = self._producer
        p.begin_transaction()
        BEFORE_SEND.reached(batch)
        body = json.dumps(record, sort_keys=True, separators=(",", ":")).encode()
        sent = p.send(self.topics.log, value=body, partition=0)
        end_futures = [
            p.send(
                self.topics.ends,
                key=e.substream.encode(),
                value=json.dumps(e.to_list(), separators=(",", ":")).encode(),
                partition=0,
            )
            for e in ends
        ]
        p.flush()
        # Every future, not just the last: kafka-python commits a transaction without a
        # batch that expired after delivery_timeout_ms (the KAFKA-5385 class of bug).
        offset = sent.get(timeout=READ_TIMEOUT_S).offset
        end_offsets = [f.get(timeout=READ_TIMEOUT_S).offset for f in end_futures]
        end_offset = end_offsets[-1] if end_offsets else None
        BEFORE_COMMIT.reached(batch)
        p.commit_transaction()
        AFTER_COMMIT.reached(batch)
        return offset, end_offset

    def _await_visible(self, offset: int) -> None:
        """Wait until ``read_committed`` readers of the ends topic see ``offset``."""
        deadline = time.monotonic() + READ_TIMEOUT_S
        while self._ends_reader.end() <= offset:
            if time.monotonic() > deadline:
                raise TrackerUnavailable(f"end events at offset {offset} not visible in time")
            time.sleep(0.01)

    def _transact(self, build: Any, batch: int | None) -> list[EndEvent] | None:
        """Steps 1-6 with retries; ``build(state)`` mutates a state copy and returns
        ``(record, ends)``, or ``None`` when there is nothing to write (returned as is)."""
        from kafka.errors import KafkaError

        last: Exception | None = None
        for attempt in range(ATTEMPTS):
            try:
                if self._producer is None:
                    self._start_producer()  # 1.
                self._catch_up()  # 2.
                state = copy.deepcopy(self._state)
                built = build(state)  # 3.
                if built is None:
                    return None
                record, ends = built
                offset, end_offset = self._write(record, ends, batch)  # 4.-5.
            except TrackerUnavailable as e:
                last = e
                continue
            except KafkaError as e:  # fenced, timed out, broker gone: outcome settled by step 1
                last = e
                log.warning("tracker transaction failed (attempt %d): %s", attempt + 1, e)
                self._close_producer()
                continue
            # 6. committed: adopt the state the record describes, past the record
            self._state = state
            self._ends.extend(ends)
            self._position = offset + 1
            if end_offset is not None:
                self._await_visible(end_offset)
            return ends
        raise TrackerUnavailable(
            f"tracker {self.topics.name}: no transaction after {ATTEMPTS} attempts: {last}"
        ) from last

    # -- TrackingAgent -----------------------------------------------------------------------
    def declare(self, namespace: str, sources: Iterable[str] = ()) -> None:
        srcs = tuple(sorted(sources))

        def build(state: TrackerState) -> tuple[dict[str, Any], list[EndEvent]] | None:
            if state.sources.get(namespace) == srcs:
                return None
            state.declare(namespace, srcs)
            return declare_record(namespace, srcs), []

        with self._lock:
            self._transact(build, None)

    def apply(self, reports: Sequence[Report]) -> list[EndEvent]:
        batch = min((r.key.batch for r in reports), default=None)

        def build(state: TrackerState) -> tuple[dict[str, Any], list[EndEvent]] | None:
            accepted = state.accept(reports)
            if not accepted:
                return None
            ends = state.settle()
            return apply_record(accepted, ends), ends

        with self._lock:
            ends = self._transact(build, batch) or []
        for e in ends:
            log.info("substream %s ended (seq %d)", e.substream, e.seq)
        return ends

    def last_seq(self) -> int:
        with self._lock:
            self._catch_up()
            return self._state.seq

    def end_events(self, after_seq: int, up_to_seq: int) -> list[EndEvent]:
        with self._lock:
            if up_to_seq > (self._ends[-1].seq if self._ends else 0):
                self._catch_up()
            return [e for e in self._ends if after_seq < e.seq <= up_to_seq]

    def source_options(self) -> dict[str, str]:
        return {"agent": "kafka", "bootstrap": self.bootstrap, "ends_topic": self.topics.ends}

    def state(self) -> TrackerState:
        with self._lock:
            self._catch_up()
            return copy.deepcopy(self._state)

    def figures(self) -> TrackerFigures:
        with self._lock:
            self._catch_up()
            return self._state.figures()

    def close(self) -> None:
        """Release the producer and readers (the agent's data stays in Kafka)."""
        with self._lock:
            self._close_producer()
            self._reader.close()
            self._ends_reader.close()
