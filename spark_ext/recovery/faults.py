"""Fault classes of the matrix and the :class:`FaultCell` a job declares for each (pure data).

How each class is injected: docs/design.md, "Fault points".

>>> from spark_ext.crash import declare
>>> p = declare("demo.3.committed", "driver", "demo commit landed")
>>> FaultCell(FaultClass.DRIVER_RAISE, p, batch=1).spec()
'demo.3.committed@1:raise'
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum

from spark_ext.crash import FaultKind, FaultPoint, FaultSpec
from spark_ext.recovery.classification import RecoveryClass

__all__ = [
    "BROKER_FAULTS",
    "DRIVER_FAULTS",
    "EXECUTOR_FAULTS",
    "FAULT_DOCS",
    "HOST_FAULTS",
    "HOST_HOLD_S",
    "POINT_OPTIONAL_FAULTS",
    "RETENTION_FAULTS",
    "Expectation",
    "ExpectedError",
    "FaultCell",
    "FaultClass",
]


class FaultClass(StrEnum):
    """A kind of production fault (docs/design.md, "Fault points")."""

    KILL = "kill"
    TASK_RAISE = "task-raise"
    DRIVER_RAISE = "driver-raise"
    CHECKPOINT_RESET = "checkpoint-reset"
    SPECULATION = "speculation"
    BROKER_PAUSE = "broker-pause"
    BROKER_RESTART = "broker-restart"
    OUTPUT_TRIM = "output-trim"
    TXN_RETENTION = "txn-retention"
    LOG_RETENTION = "log-retention"
    DISORDER = "disorder"
    HOST_LOSS = "host-loss"
    PARTITION = "partition"
    SLOW_LINK = "slow-link"
    STORE_ERRORS = "store-errors"
    DRIVER_PARTITION = "driver-partition"


#: One line per fault class, for the CLI and the report.
FAULT_DOCS: dict[FaultClass, str] = {
    FaultClass.KILL: "SIGKILL of the job at the point, restart from the checkpoint",
    FaultClass.TASK_RAISE: "a task raises on attempt 0 after the step; Spark retries it",
    FaultClass.DRIVER_RAISE: "the driver raises after the step's durable effect; restart",
    FaultClass.CHECKPOINT_RESET: "checkpoint deleted, output kept, job run again",
    FaultClass.SPECULATION: "spark.speculation on, a straggler task (sleep) at the point",
    FaultClass.BROKER_PAUSE: "own broker SIGSTOPped past the delivery timeout, resumed",
    FaultClass.BROKER_RESTART: "own broker SIGKILLed and restarted on its data",
    FaultClass.OUTPUT_TRIM: "killed at the point, output topic trimmed (retention), restart",
    FaultClass.TXN_RETENTION: "killed at the point, Delta txn expired (retention), restart",
    FaultClass.LOG_RETENTION: "killed at the point, Delta log trimmed to a checkpoint, restart",
    FaultClass.DISORDER: "input event times out of order beyond the partition's promise",
    FaultClass.HOST_LOSS: "every process of the host running a task at the point killed",
    FaultClass.PARTITION: "the host running a task at the point cut from broker and store, healed",
    FaultClass.SLOW_LINK: "the host running a task at the point: link slowed, lossy, to the end",
    FaultClass.STORE_ERRORS: "the object store answers 503/500 to a share of requests for a while",
    FaultClass.DRIVER_PARTITION: "the driver cut from the broker between a sink's two phases, healed",
}

#: Fault classes acting on the isolated host whose task (or, ``driver-partition``, whose
#: driver) reached the point (docs/design.md, "Isolated hosts"): it holds there
#: :data:`HOST_HOLD_S` while the harness acts.
HOST_FAULTS = frozenset(
    {FaultClass.HOST_LOSS, FaultClass.PARTITION, FaultClass.SLOW_LINK, FaultClass.DRIVER_PARTITION}
)
HOST_HOLD_S = 5.0
#: Fault classes whose point runs in a task, and those whose point runs on the driver.
EXECUTOR_FAULTS = frozenset(
    {FaultClass.TASK_RAISE, FaultClass.SPECULATION, FaultClass.HOST_LOSS, FaultClass.PARTITION}
)
DRIVER_FAULTS = frozenset({FaultClass.DRIVER_RAISE, FaultClass.DRIVER_PARTITION})
#: Fault classes that need a broker of the harness's own.
BROKER_FAULTS = frozenset({FaultClass.BROKER_PAUSE, FaultClass.BROKER_RESTART})
#: Fault classes acting on the output between a kill at the point and the restart.
RETENTION_FAULTS = frozenset(
    {FaultClass.OUTPUT_TRIM, FaultClass.TXN_RETENTION, FaultClass.LOG_RETENTION}
)
#: Fault classes that may do without a point (``disorder``: the kill at its point is optional;
#: ``speculation`` without a point: the job refuses to run with speculation on, a typed error).
POINT_OPTIONAL_FAULTS = frozenset(
    {FaultClass.CHECKPOINT_RESET, FaultClass.DISORDER, FaultClass.SPECULATION}
)


@dataclass(frozen=True)
class ExpectedError:
    """The outcome "the job stops with the typed error ``name`` (a
    :class:`~spark_ext.errors.SparkExtError` subclass) and writes nothing"."""

    name: str

    @classmethod
    def of(cls, error: type[BaseException]) -> ExpectedError:
        return cls(error.__name__)

    def __str__(self) -> str:
        return self.name


#: What a cell must give: a recovery class, or a typed error with nothing written.
Expectation = RecoveryClass | ExpectedError


@dataclass(frozen=True)
class FaultCell:
    """One fault class as a job declares it: where it is injected and what it must give.

    ``point``: none for ``checkpoint-reset``; optional for ``disorder`` (a kill there and a
    restart); none for ``speculation`` in a job that refuses it (``expected``: its typed
    error). ``batch``: ``None`` fires the first time the point is reached. ``expected``: for
    every output or per output, ``None``: each output's class under ``kill``. ``seconds``: the
    straggler's sleep, how long the broker stays paused or down, the host cut, or the store
    failing. ``partition``: an executor point fires only in that partition's task (one
    straggler among quick tasks). ``bound_s`` (host and store faults): the liveness bound, the
    most seconds from the heal (or the host's loss) to the first batch committed after it;
    ``slow-link``: from the link slowed to the end of the run.
    """

    fault: FaultClass
    point: FaultPoint | None = None
    batch: int | None = None
    expected: Expectation | Mapping[str, Expectation] | None = None
    seconds: float = 0.0
    partition: int | None = None
    bound_s: float = 0.0

    def __post_init__(self) -> None:
        if self.fault is FaultClass.CHECKPOINT_RESET and self.point is not None:
            raise ValueError("checkpoint-reset takes no fault point")
        if self.fault not in POINT_OPTIONAL_FAULTS and self.point is None:
            raise ValueError(f"{self.fault} needs a fault point")
        if self.point is not None:
            if self.fault in EXECUTOR_FAULTS and self.point.side == "driver":
                raise ValueError(f"{self.fault} needs an executor point, not {self.point.name}")
            if self.fault in DRIVER_FAULTS and self.point.side == "executor":
                raise ValueError(f"{self.fault} needs a driver point, not {self.point.name}")
        straggler = self.fault is FaultClass.SPECULATION and self.point is not None
        cut = self.fault in (FaultClass.PARTITION, FaultClass.STORE_ERRORS)
        if (self.fault in BROKER_FAULTS or straggler or cut) and self.seconds <= 0:
            raise ValueError(f"{self.fault} needs seconds > 0")
        if self.fault is FaultClass.DRIVER_PARTITION and self.seconds < 2 * HOST_HOLD_S:
            # The driver leaves the point HOST_HOLD_S after it: its commit must meet the cut.
            raise ValueError(f"{self.fault} needs seconds >= {2 * HOST_HOLD_S:g} (twice the hold)")
        if (self.fault in HOST_FAULTS | {FaultClass.STORE_ERRORS}) and self.bound_s <= 0:
            raise ValueError(f"{self.fault} needs a liveness bound: bound_s > 0")
        if self.fault is FaultClass.SPECULATION and self.point is None:
            if not isinstance(self.expected, ExpectedError):
                raise ValueError("speculation without a straggler point expects a typed error")

    @property
    def kind(self) -> FaultKind | None:
        """What the point does when reached: broker faults and stragglers only sleep there."""
        if self.point is None:
            return None
        if self.fault in RETENTION_FAULTS | {FaultClass.KILL, FaultClass.DISORDER}:
            return FaultKind.KILL
        if self.fault in (FaultClass.TASK_RAISE, FaultClass.DRIVER_RAISE):
            return FaultKind.RAISE
        return FaultKind.SLEEP

    def spec(self) -> str | None:
        """The ``SPARK_EXT_FAULT`` value of the cell (``None`` when no point is involved); broker
        and host faults hold the job at the point (1 s, :data:`HOST_HOLD_S`) while the harness
        acts."""
        if self.point is None or self.kind is None:
            return None
        hold = {FaultClass.SPECULATION: self.seconds, **dict.fromkeys(HOST_FAULTS, HOST_HOLD_S)}
        seconds = hold.get(self.fault, 1.0) if self.kind is FaultKind.SLEEP else 0.0
        return str(FaultSpec(self.point.name, self.batch, self.kind, seconds, self.partition))

    def describe(self) -> str:
        """``<fault class> at <spec>`` for tables and reports."""
        spec = self.spec()
        return f"{self.fault} at {spec}" if spec else str(self.fault)

    def expected_for(self, output: str, default: RecoveryClass) -> Expectation:
        """The outcome required of ``output`` (``default``: its class under ``kill``)."""
        if self.expected is None:
            return default
        if isinstance(self.expected, RecoveryClass | ExpectedError):
            return self.expected
        return self.expected.get(output, default)
