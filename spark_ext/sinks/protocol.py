"""The sink commit protocol: prepare on executors, commit on the driver, keyed by (sink, batch).

Spark re-runs a micro-batch whose sink commit landed but whose commit-log entry did not
(docs/design.md invariant 1). Every exactly-once sink here therefore records, atomically with the
data, the id of the last batch it committed for its *sink id*, and treats a batch whose id is
not above the recorded one as a replay: it is recognised and skipped.

Two-phase commit (``TWO_PHASE`` steps, the two-phase Delta sinks)
-----------------------------------------------------------------
1. ``staged`` (executor task): the task wrote its partition's rows to staging -- Parquet files
   that no Delta snapshot references -- and returns a small commit message naming what it
   staged. Nothing is visible.
2. ``before_commit`` (driver, ``commit(messages, batch_id)``): every task staged. The sink
   reads the batch id it last recorded for its sink id; if it is ``== batch_id`` the batch is
   a replay of a committed batch and step 3 is skipped. If it is ``> batch_id`` the query is
   not the one that wrote the output (checkpoint reset, second query, zombie):
   :class:`~spark_ext.sinks.errors.BatchRegressionError`, nothing written.
3. ``committed`` (driver): ONE atomic commit makes every staged part visible together with
   the marker (sink id, batch id): a Delta commit holding the add actions and
   ``txn(appId=sink id, version=batch id)``. Before it nothing of the batch is visible; after
   it all is.
4. ``cleaned`` (driver): staged leftovers of the batch are removed (task attempts that lost,
   or the whole staging of a skipped replay). Spark then writes its own commit-log entry.

``abort(messages, batch_id)`` (a task failed) removes the batch's staging; the next start of
the query removes staging that no commit will use (orphans of a killed driver).

Idempotent writes (``IDEMPOTENT`` steps, the ``foreachBatch`` sinks)
--------------------------------------------------------------------
1. ``before_write`` (driver, inside ``foreachBatch``): the batch's DataFrame is known; the
   sink checked whether (sink id, batch id) is already recorded and, if so, skips the batch.
2. ``partial`` (executor task): part of the batch is written, the rest is not (Kafka only:
   the point where a plain sink leaves a half-written batch behind).
3. ``written`` (driver): every row of the batch is written. For Delta the write and the
   marker are one commit (``txnAppId``/``txnVersion``), so step 4 is the same point.
4. ``marked`` (driver): the marker (sink id, batch id) is recorded; Spark then writes its
   commit log.

Each step is a declared fault point (:mod:`spark_ext.crash`) named
``<sink prefix>.<number>.<step name>`` (for example ``delta2pc.3.committed``), reached right
after the step's durable effect; tests inject a fault there with
``SPARK_EXT_FAULT=<point>@<batch>[:kill|raise|sleep=<s>]``.

Example
-------
>>> DELTA_TWO_PHASE.point(3)
'delta2pc.3.committed'
>>> [s.name for s in TWO_PHASE]
['staged', 'before_commit', 'committed', 'cleaned']
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
    """Return ``sink_id`` if it is a valid sink id, else raise :class:`SinkConfigError`.

    A sink id is stable for the life of the output (it keys idempotence): letters, digits,
    ``_`` and ``.``, at most 100 characters, starting with a letter or digit.
    """
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


#: The steps of the two-phase protocol, numbered as in the module docstring.
TWO_PHASE: tuple[Step, ...] = (
    Step(1, "staged", "executor"),
    Step(2, "before_commit", "driver"),
    Step(3, "committed", "driver"),
    Step(4, "cleaned", "driver"),
)

#: The steps of the idempotent (``foreachBatch``) protocol, numbered as in the docstring.
IDEMPOTENT: tuple[Step, ...] = (
    Step(1, "before_write", "driver"),
    Step(2, "partial", "executor"),
    Step(3, "written", "driver"),
    Step(4, "marked", "driver"),
)


#: The steps of the Kafka sink with one transaction per task slice (records never reach the
#: driver; ``connectors.kafka.slices``): three inside each task, one on the driver.
SLICED: tuple[Step, ...] = (
    Step(1, "initialised", "executor"),
    Step(2, "in_transaction", "executor"),
    Step(3, "sliced", "executor"),
    Step(4, "recorded", "driver"),
)


@dataclass(frozen=True)
class Protocol:
    """The steps of one sink, with the fault point of each (declared when the protocol is).

    Parameters
    ----------
    prefix
        Short name of the sink in crash-point names, e.g. ``"delta2pc"``.
    steps
        :data:`TWO_PHASE`, :data:`IDEMPOTENT` or :data:`SLICED`, or the subset a sink has.
    """

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
    """The driver side of a two-phase sink: what steps 2-4 and abort do for one target.

    A subclass implements four small methods; :func:`commit_batch` runs them in the order of
    the protocol with the crash points in between, so the sequence lives in one place.
    """

    protocol: Protocol
    sink_id: str

    @abstractmethod
    def last_committed_batch(self) -> int | None:
        """The batch id recorded for this sink id by its last commit, ``None`` if none yet."""

    @abstractmethod
    def commit_staged(self, batch_id: int, messages: Sequence[M]) -> None:
        """Step 3: make every staged part and the marker (sink id, batch id) visible at once.

        Must raise (and commit nothing) if it cannot be atomic.
        """

    @abstractmethod
    def clean(self, batch_id: int, messages: Sequence[M], committed: bool) -> None:
        """Step 4 and abort: remove staging of ``batch_id`` no commit references.

        ``committed`` says whether this batch's ``messages`` were just committed (keep what
        they name) or not (a skipped replay or an abort: remove what they name).
        """

    @abstractmethod
    def recover(self) -> None:
        """At query start: remove staging of earlier runs that no commit will use."""


def check_batch_order(sink_id: str, batch_id: int, recorded: int | None) -> bool:
    """Whether ``batch_id`` is a replay of the recorded batch (skip it) or new (write it).

    Raises :class:`BatchRegressionError` for a batch id below the recorded one.
    """
    if recorded is None or batch_id > recorded:
        return False
    if batch_id == recorded:
        return True
    raise BatchRegressionError(sink_id, batch_id, recorded)


def commit_batch(committer: TwoPhaseCommitter[M], batch_id: int, messages: Sequence[M]) -> Outcome:
    """Run steps 2-4 of the two-phase protocol for one batch (on the driver).

    ``messages`` are the tasks' commit messages (step 1 ran in the tasks).
    """
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
