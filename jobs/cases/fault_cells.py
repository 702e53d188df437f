"""What the job families' cases share: the expected typed errors, cell builders, retention."""

from __future__ import annotations

from pathlib import Path

from spark_ext.crash import FaultPoint
from spark_ext.recovery import (
    ExpectedError,
    FaultCell,
    FaultClass,
    HarnessContext,
    RecoveryClass,
    RunSlot,
)
from spark_ext.sinks.errors import (
    DeltaTxnExpiredError,
    ReplayUnprovableError,
    SinkConfigError,
    SinkOwnerError,
)
from spark_ext.tracker.errors import CheckpointBehindAgent

#: The typed error a checkpoint reset must end in when the output is kept (invariant 6): a
#: reset checkpoint is a new query id, and another query owns the sink (issue #24, N11).
OWNER_REFUSED = ExpectedError.of(SinkOwnerError)
#: The tracker's: its agent applied batches the reset checkpoint never reached.
BEHIND_AGENT = ExpectedError.of(CheckpointBehindAgent)
#: A replay whose evidence (the output topic) retention trimmed (invariant 6).
UNPROVABLE = ExpectedError.of(ReplayUnprovableError)
#: A Delta output whose ``txn`` retention expired next to the sink's committed files.
TXN_EXPIRED = ExpectedError.of(DeltaTxnExpiredError)
#: A sink that cannot fence two live attempts of a task refuses ``spark.speculation`` before it
#: writes anything.
SPECULATION_REFUSED = ExpectedError.of(SinkConfigError)
PRECISE = RecoveryClass.PRECISE
#: How long the broker faults keep the broker paused (past kafka-python's default
#: ``delivery_timeout_ms`` of 120 s) or down.
BROKER_PAUSE_S = 130.0
BROKER_DOWN_S = 5.0


def cells(*declared: FaultCell) -> dict[FaultClass, FaultCell]:
    """A job's fault cells by fault class (each class once)."""
    out = {c.fault: c for c in declared}
    if len(out) != len(declared):
        raise ValueError("a fault class declared twice")
    return out


def broker_cells(trigger: FaultPoint, batch: int = 0) -> tuple[FaultCell, FaultCell]:
    """Broker pause and kill+restart, acting when ``trigger`` is reached in ``batch``."""
    return (
        FaultCell(FaultClass.BROKER_PAUSE, trigger, batch, PRECISE, seconds=BROKER_PAUSE_S),
        FaultCell(FaultClass.BROKER_RESTART, trigger, batch, PRECISE, seconds=BROKER_DOWN_S),
    )


def expire_delta(table: Path, fault: FaultClass) -> None:
    """What retention does to the Delta table at ``table`` under ``fault``."""
    from spark_ext.recovery.retention import expire_txns, trim_delta_log

    if fault is FaultClass.TXN_RETENTION:
        expire_txns(table)
    elif fault is FaultClass.LOG_RETENTION:
        trim_delta_log(table)
    else:
        raise ValueError(f"{fault} does not act on a Delta table")


def run_args(ctx: HarnessContext, slot: RunSlot) -> list[str]:
    """The arguments every run of a job shares: its profile, input topic and ``--out``."""
    return ["--profile", ctx.profile, "--topic", ctx.topic("in"), "--out", str(slot.out)]
