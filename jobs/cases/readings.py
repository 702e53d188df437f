"""Cases of the jobs on sensor readings (:func:`jobs.ordering_dedup.produce_readings`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from connectors.delta.dedup_staging import DEDUP_DELTA
from jobs.cases.fault_cells import (
    OWNER_REFUSED,
    PRECISE,
    TXN_EXPIRED,
    broker_cells,
    cells,
    expire_delta,
    run_args,
)
from spark_ext.dedup import AFTER_OUTPUT as DEDUP_AFTER_OUTPUT
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

#: The ordering job's result rows (its ``RESULT_COLUMNS`` without the topic name).
READINGS = OutputSpec(
    columns=(
        "key",
        "record_id",
        "event_time",
        "temp_c",
        "temp_f",
        "ewma_f",
        "seq",
        "partition",
        "offset",
    )
)


#: The dedup sink's output: distinct readings with the coordinates of the copy kept.
UNIQUE = OutputSpec(columns=("reading_id", "sensor", "event_time", "temp_c", "partition", "offset"))


class ReadingsCase(RecoveryCase):
    """A job on sensor readings over two partitions, writing Delta ``tables`` under ``--out``.

    Runs read ``limit`` offsets a batch; the restart catches up in one batch, so the recovered
    output comes from another batch plan than the clean one.
    """

    def __init__(
        self,
        name: str,
        module: str,
        crash: CrashPlan,
        output: ExpectedOutput,
        description: str,
        tables: Sequence[str],
        readings: Mapping[str, int],
        extra_args: Sequence[str] = (),
        limit: int = 50,
        cells: Mapping[FaultClass, FaultCell] | None = None,
    ) -> None:
        self.name = name
        self.module = module
        self.crash = crash
        self.cells = dict(cells or {})
        self.outputs = (output,)
        self.description = description
        self.tables = tuple(tables)
        self.readings = dict(readings)
        self.extra_args = tuple(extra_args)
        self.limit = limit

    def prepare(self, ctx: HarnessContext) -> None:
        from connectors.kafka import create_topic
        from jobs.ordering_dedup import produce_readings

        create_topic(ctx.bootstrap, ctx.topic("in"), 2)
        produce_readings(ctx.bootstrap, ctx.topic("in"), partitions=2, **self.readings)

    def restart_args(self, ctx: HarnessContext, slot: RunSlot) -> list[str]:
        return [*run_args(ctx, slot), *self.extra_args]

    def job_args(self, ctx: HarnessContext, slot: RunSlot) -> list[str]:
        return [*self.restart_args(ctx, slot), "--max-offsets-per-trigger", str(self.limit)]

    def read_output(self, ctx: HarnessContext, slot: RunSlot, output: str) -> list[dict[str, Any]]:
        return read_delta_rows(slot.out / output, self.outputs[0].spec.read_columns())

    def expire_output(self, ctx: HarnessContext, slot: RunSlot, fault: FaultClass) -> None:
        """Retention on every Delta table the job appends to (output, catalog, late rows)."""
        for table in self.tables:
            if (slot.out / table / "_delta_log").is_dir():
                expire_delta(slot.out / table, fault)


class OrderingCase(ReadingsCase):
    """:mod:`jobs.ordering_dedup`: only an order fixed by the buffer makes the recovered EWMA
    equal the clean run's."""

    def __init__(
        self,
        name: str,
        expected: RecoveryClass,
        description: str,
        extra_args: Sequence[str] = (),
        duplicate_every: int = 0,
        cells: Mapping[FaultClass, FaultCell] | None = None,
    ) -> None:
        super().__init__(
            name,
            "jobs.ordering_dedup",
            CrashPlan.at(DEDUP_AFTER_OUTPUT, 0),
            ExpectedOutput("ewma", READINGS, expected),
            description,
            tables=("ewma", "catalog", "late"),
            readings={"sensors": 4, "per_sensor": 30, "duplicate_every": duplicate_every},
            extra_args=("--partitions", "2", *extra_args),
            cells=cells,
        )


class DedupDeltaCase(ReadingsCase):
    """:mod:`jobs.dedup_delta` on readings of which every third is delivered twice.

    Killed after the catalog commit of batch 1 (before its output). The kept copy is always
    the first delivery (its copy follows it in the same partition), so the output equals the
    clean run row for row.
    """

    def __init__(self) -> None:
        super().__init__(
            "dedup_delta",
            "jobs.dedup_delta",
            CrashPlan.at(DEDUP_DELTA.fault(2), 1),
            ExpectedOutput("unique", UNIQUE, RecoveryClass.PRECISE),
            "at-least-once input + DeltaDedupSink: each reading exactly once",
            tables=("unique", "catalog"),
            readings={"sensors": 3, "per_sensor": 30, "duplicate_every": 3},
            limit=40,
            cells=cells(
                # Step 1 runs in the task of each bucket (decided, staged, filters saved as the
                # batch's version): a failed attempt 0 is retried from the same filter version.
                FaultCell(FaultClass.TASK_RAISE, DEDUP_DELTA.fault(1), 1),
                FaultCell(
                    FaultClass.SPECULATION, DEDUP_DELTA.fault(1), 1, seconds=5.0, partition=0
                ),
                FaultCell(FaultClass.DRIVER_RAISE, DEDUP_DELTA.fault(2), 1),
                FaultCell(FaultClass.CHECKPOINT_RESET, expected=OWNER_REFUSED),
                *broker_cells(DEDUP_DELTA.fault(4)),
                # Output and catalog written for batch 1, the filter state not saved yet.
                FaultCell(FaultClass.TXN_RETENTION, DEDUP_DELTA.fault(3), 1, TXN_EXPIRED),
                FaultCell(FaultClass.LOG_RETENTION, DEDUP_DELTA.fault(3), 1, PRECISE),
            ),
        )


#: The jobs on sensor readings, in the order :mod:`jobs.registry` lists them.
CASES: tuple[RecoveryCase, ...] = (
    OrderingCase(
        "ordering_dedup",
        RecoveryClass.PRECISE,
        "ordering buffer + dedup + EWMA: same output under another batch plan",
        duplicate_every=5,
        cells=cells(
            FaultCell(FaultClass.DRIVER_RAISE, DEDUP_AFTER_OUTPUT, 0),
            FaultCell(FaultClass.CHECKPOINT_RESET, expected=OWNER_REFUSED),
            # Output and catalog written for batch 0, Spark's commit log not: the replay must
            # be refused once DedupSink's txns expired, not written again.
            FaultCell(FaultClass.TXN_RETENTION, DEDUP_AFTER_OUTPUT, 0, TXN_EXPIRED),
        ),
    ),
    OrderingCase(
        "ordering_no_buffer",
        RecoveryClass.ROLLBACK_DIVERGENT,
        "EWMA folded in arrival order (--no-buffer): another batch plan, other values",
        extra_args=("--no-buffer", "--no-dedup"),
    ),
    DedupDeltaCase(),
)
