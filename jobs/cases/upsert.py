"""Case of :mod:`jobs.upsert_totals`: running totals MERGEd at least once.

The one job whose output is rollback-convergent: its change feed repeats, then converges.
"""

from __future__ import annotations

from jobs.cases.fault_cells import PRECISE, cells, run_args
from jobs.cases.kafka_to_delta import KafkaToDeltaCase
from jobs.upsert_totals import AFTER_UPSERT
from spark_ext.recovery import (
    CrashPlan,
    ExpectedOutput,
    FaultCell,
    FaultClass,
    FinalStateView,
    HarnessContext,
    OutputSpec,
    RecoveryCase,
    RecoveryClass,
    RunSlot,
)

#: The changes feed of :mod:`jobs.upsert_totals`: per user, the last change is its state.
CHANGES = OutputSpec(
    columns=("user_id", "events", "total_cents"),
    final_state=FinalStateView(
        key=("user_id",), value=("events", "total_cents"), order=("batch_id",)
    ),
)
#: Its MERGEd table: one row per user.
UPSERTED = OutputSpec(columns=("user_id", "events", "total_cents"))


class UpsertTotalsCase(KafkaToDeltaCase):
    """:mod:`jobs.upsert_totals`: killed after batch 0's upsert, restarted without the rate
    limit, so the restart publishes other intermediate totals than the clean run."""

    def __init__(self) -> None:
        super().__init__(
            "upsert_totals",
            "jobs.upsert_totals",
            CrashPlan.at(AFTER_UPSERT, 0),
            [
                ExpectedOutput("totals", UPSERTED, RecoveryClass.PRECISE),
                ExpectedOutput("changes", CHANGES, RecoveryClass.ROLLBACK_CONVERGENT),
            ],
            "running totals MERGEd at least once: the change feed repeats, then converges",
            events=300,
            cells=cells(
                FaultCell(FaultClass.DRIVER_RAISE, AFTER_UPSERT, 0),
                # Spark's state goes with the checkpoint: the same batch plan from zero again
                # recomputes the same totals (the table converges at once) and republishes
                # every change.
                FaultCell(
                    FaultClass.CHECKPOINT_RESET,
                    expected={"totals": PRECISE, "changes": RecoveryClass.ROLLBACK_REPEATING},
                ),
            ),
        )

    def restart_args(self, ctx: HarnessContext, slot: RunSlot) -> list[str]:
        return run_args(ctx, slot)


#: The upsert jobs, in the order :mod:`jobs.registry` lists them.
CASES: tuple[RecoveryCase, ...] = (UpsertTotalsCase(),)
