"""The sink commit protocol as data: numbered steps, their fault points, the driver's steps 2-4.

Two-phase (``TWO_PHASE``, docs/design.md, "Sink commit protocol"):

1. ``staged`` (task): its rows staged where nothing reads them; returns a small commit message.
2. ``before_commit`` (driver): the recorded batch read; equal to ``batch_id``: a replay, step 3
   skipped; above: :class:`~spark_ext.sinks.errors.BatchRegressionError`, nothing written.
3. ``committed`` (driver): ONE atomic commit of every staged part and (sink id, batch id).
4. ``cleaned`` (driver): staging no commit took is removed; Spark then writes its commit log.

Idempotent (``IDEMPOTENT``, ``foreachBatch``): 1. ``before_write`` (driver: a recorded batch is
skipped), 2. ``partial`` (task: part of the batch written), 3. ``written`` (driver: all of it),
4. ``marked`` (driver: the marker recorded). Sliced (``SLICED``): 1-3 in each task, 4 on the
driver. Each step is the fault point ``<prefix>.<number>.<name>``, reached right after the
step's durable effect.

>>> DELTA_TWO_PHASE.point(3)
'delta2pc.3.committed'
"""

from __future__ import annotations

import enum
import logging
import re
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Generic, Literal, TypeVar

from spark_ext.crash import FaultPoint, declare
from spark_ext.sinks.errors import BatchRegressionError, SinkConfigError

__all__ = [
    "DELTA_IDEMPOTENT",
    "DELTA_TWO_PHASE",
    "IDEMPOTENT",
    "KAFKA_IDEMPOTENT",
    "KAFKA_SLICED",
    "SINK_ID_PATTERN",
    "SLICED",
    "TWO_PHASE",
    "Outcome",
    "Protocol",
    "Step",
    "TwoPhaseCommitter",
    "abort_batch",
    "check_batch_order",
    "commit_batch",
    "validate_sink_id",
]

log = logging.getLogger(__name__)

#: What a sink id may contain: it names files, consumer groups and transactional ids.
SINK_ID_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.]{0,99}$")


def validate_sink_id(sink_id: str) -> str:
    """``sink_id`` if it matches :data:`SINK_ID_PATTERN`, else :class:`SinkConfigError`."""
    if not isinstance(sink_id, str) or not SINK_ID_PATTERN.match(sink_id):
        raise SinkConfigError(
            "sink_id",
            f"{sink_id!r} must match {SINK_ID_PATTERN.pattern} (letters, digits, '_', '.')",
        )
    return sink_id


@dataclass(frozen=True)
class Step:
    """One numbered step of a commit protocol."""

    number: int
    name: str
    side: Literal["executor", "driver"]


TWO_PHASE: tuple[Step, ...] = (
    Step(1, "staged", "executor"),
    Step(2, "before_commit", "driver"),
    Step(3, "committed", "driver"),
    Step(4, "cleaned", "driver"),
)

IDEMPOTENT: tuple[Step, ...] = (
    Step(1, "before_write", "driver"),
    Step(2, "partial", "executor"),
    Step(3, "written", "driver"),
    Step(4, "marked", "driver"),
)

SLICED: tuple[Step, ...] = (
    Step(1, "initialised", "executor"),
    Step(2, "in_transaction", "executor"),
    Step(3, "sliced", "executor"),
    Step(4, "recorded", "driver"),
)


@dataclass(frozen=True)
class Protocol:
    """The steps of one sink (``prefix`` names its fault points, e.g. ``"delta2pc"``); each
    step's fault point is declared when the protocol is built."""

    prefix: str
    steps: tuple[Step, ...]

    def __post_init__(self) -> None:
        for s in self.steps:
            declare(self.point(s.number), s.side, f"{self.prefix}: step {s.number} ({s.name}) done")

    def step(self, number: int) -> Step:
        for s in self.steps:
            if s.number == number:
                return s
        raise KeyError(f"{self.prefix} has no step {number}")

    def point(self, number: int) -> str:
        """The fault-point name of step ``number``: ``<prefix>.<number>.<name>``."""
        return f"{self.prefix}.{number}.{self.step(number).name}"

    def points(self) -> list[str]:
        """Every fault point of the protocol, in step order."""
        return [self.point(s.number) for s in self.steps]

    def fault(self, number: int) -> FaultPoint:
        """The declared fault point of step ``number``."""
        return declare(self.point(number), self.step(number).side)

    def reached(self, number: int, batch_id: int | None) -> None:
        """Step ``number`` of batch ``batch_id`` is durable: an injected fault may fire here."""
        self.fault(number).reached(batch_id)


DELTA_TWO_PHASE = Protocol("delta2pc", TWO_PHASE)
DELTA_IDEMPOTENT = Protocol("delta_idem", tuple(s for s in IDEMPOTENT if s.number in (1, 3)))
KAFKA_IDEMPOTENT = Protocol("kafka_idem", IDEMPOTENT)
KAFKA_SLICED = Protocol("kafka_tx", SLICED)


class Outcome(enum.Enum):
    """What the driver did with a batch."""

    COMMITTED = "committed"
    SKIPPED_REPLAY = "skipped_replay"


M = TypeVar("M")


class TwoPhaseCommitter(ABC, Generic[M]):
    """The driver side of a two-phase sink for one target; :func:`commit_batch` runs it."""

    protocol: Protocol
    sink_id: str

    @abstractmethod
    def last_committed_batch(self) -> int | None:
        """The batch id recorded for this sink id by its last commit, ``None`` if none yet."""

    @abstractmethod
    def commit_staged(self, batch_id: int, messages: Sequence[M]) -> None:
        """Step 3: make every staged part and (sink id, batch id) visible at once, or raise."""

    @abstractmethod
    def clean(self, batch_id: int, messages: Sequence[M], committed: bool) -> None:
        """Step 4 and abort: remove staging of ``batch_id`` no commit references; keep what
        ``messages`` name only if they were just ``committed``."""

    @abstractmethod
    def recover(self) -> None:
        """At query start: remove staging of earlier runs that no commit will use."""


def check_batch_order(sink_id: str, batch_id: int, recorded: int | None) -> bool:
    """Whether ``batch_id`` replays the recorded batch (skip) or is new; below it: raises."""
    if recorded is None or batch_id > recorded:
        return False
    if batch_id == recorded:
        return True
    raise BatchRegressionError(sink_id, batch_id, recorded)


def commit_batch(committer: TwoPhaseCommitter[M], batch_id: int, messages: Sequence[M]) -> Outcome:
    """Run steps 2-4 for one batch on the driver; ``messages`` are the tasks' (step 1)."""
    p = committer.protocol
    # 2. Every task staged; read what this sink id recorded last.
    last = committer.last_committed_batch()
    p.reached(2, batch_id)
    if check_batch_order(committer.sink_id, batch_id, last):
        log.info(
            "%s batch %d: already committed (recorded %d), replay skipped",
            committer.sink_id,
            batch_id,
            last,
        )
        outcome = Outcome.SKIPPED_REPLAY
    else:
        # 3. One atomic commit: staged parts + marker (sink id, batch id).
        committer.commit_staged(batch_id, messages)
        p.reached(3, batch_id)
        outcome = Outcome.COMMITTED
    # 4. Remove leftovers; Spark writes its commit log after this returns.
    committer.clean(batch_id, messages, committed=outcome is Outcome.COMMITTED)
    p.reached(4, batch_id)
    return outcome


def abort_batch(committer: TwoPhaseCommitter[M], batch_id: int, messages: Sequence[M]) -> None:
    """Abort: a task of ``batch_id`` failed; remove what the others staged."""
    log.warning("%s batch %d aborted: removing its staging", committer.sink_id, batch_id)
    committer.clean(batch_id, messages, committed=False)
