"""Case of :mod:`jobs.dedup_delta`: the exact dedup sink on readings delivered twice."""

from __future__ import annotations

from typing import Any

from connectors.delta.dedup_staging import DEDUP_DELTA
from jobs.cases.fault_cells import (
    OWNER_REFUSED,
    PRECISE,
    TXN_EXPIRED,
    broker_cells,
    cells,
    expire_delta,
)
from spark_ext.recovery import (
    CrashPlan,
    ExpectedOutput,
    FaultCell,
    FaultClass,
    HarnessContext,
    OutputSpec,
    RecoveryCase,
    RecoveryClass,
    RunSlot,
    read_delta_rows,
)

#: The dedup sink's output: distinct readings with the coordinates of the copy kept.
UNIQUE = OutputSpec(columns=("reading_id", "sensor", "event_time", "temp_c", "partition", "offset"))


class DedupDeltaCase(RecoveryCase):
    """:mod:`jobs.dedup_delta` on readings of which every third is delivered twice.

    Killed after the catalog commit of batch 1 (before its output); the restart catches up
    the backlog in one batch. The kept copy is always the first delivery (its copy follows it
    in the same partition), so the output equals the clean run row for row.
    """

    def __init__(self, limit: int = 40) -> None:
        self.name = "dedup_delta"
        self.module = "jobs.dedup_delta"
        self.crash = CrashPlan.at(DEDUP_DELTA.fault(2), 1)
        self.cells = cells(
            # Step 1 runs in the task of each bucket (decided, staged, filters saved as the
            # batch's version): a failed attempt 0 is retried from the same filter version.
            FaultCell(FaultClass.TASK_RAISE, DEDUP_DELTA.fault(1), 1),
            FaultCell(FaultClass.SPECULATION, DEDUP_DELTA.fault(1), 1, seconds=5.0, partition=0),
            FaultCell(FaultClass.DRIVER_RAISE, DEDUP_DELTA.fault(2), 1),
            FaultCell(FaultClass.CHECKPOINT_RESET, expected=OWNER_REFUSED),
            *broker_cells(DEDUP_DELTA.fault(4)),
            # Output and catalog written for batch 1, the filter state not saved yet.
            FaultCell(FaultClass.TXN_RETENTION, DEDUP_DELTA.fault(3), 1, TXN_EXPIRED),
            FaultCell(FaultClass.LOG_RETENTION, DEDUP_DELTA.fault(3), 1, PRECISE),
        )
        self.outputs = (ExpectedOutput("unique", UNIQUE, RecoveryClass.PRECISE),)
        self.description = "at-least-once input + DeltaDedupSink: each reading exactly once"
        self.limit = limit

    def prepare(self, ctx: HarnessContext) -> None:
        from connectors.kafka import create_topic
        from jobs.ordering_dedup import produce_readings

        create_topic(ctx.bootstrap, ctx.topic("in"), 2)
        produce_readings(
            ctx.bootstrap, ctx.topic("in"), sensors=3, per_sensor=30, duplicate_every=3
        )

    def restart_args(self, ctx: HarnessContext, slot: RunSlot) -> list[str]:
        return ["--profile", ctx.profile, "--topic", ctx.topic("in"), "--out", str(slot.out)]

    def job_args(self, ctx: HarnessContext, slot: RunSlot) -> list[str]:
        return [*self.restart_args(ctx, slot), "--max-offsets-per-trigger", str(self.limit)]

    def read_output(self, ctx: HarnessContext, slot: RunSlot, output: str) -> list[dict[str, Any]]:
        return read_delta_rows(slot.out / output, UNIQUE.read_columns())

    def expire_output(self, ctx: HarnessContext, slot: RunSlot, fault: FaultClass) -> None:
        """Retention on the output and on the exact catalog (both Delta, both with a txn)."""
        for table in ("unique", "catalog"):
            expire_delta(slot.out / table, fault)


#: The dedup jobs, in the order :mod:`jobs.registry` lists them.
CASES: tuple[RecoveryCase, ...] = (DedupDeltaCase(),)
