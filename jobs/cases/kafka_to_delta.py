"""Cases of the jobs reading demo events from Kafka into Delta tables under ``--out``."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from jobs.at_least_once import AFTER_WRITE as AT_LEAST_ONCE_AFTER_WRITE
from jobs.at_most_once import AFTER_OFFSET_COMMIT as AT_MOST_ONCE_AFTER_OFFSET_COMMIT
from jobs.cases.fault_cells import (
    OWNER_REFUSED,
    PRECISE,
    TXN_EXPIRED,
    broker_cells,
    cells,
    expire_delta,
    run_args,
)
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
    read_delta_rows,
)
from spark_ext.sinks.protocol import DELTA_IDEMPOTENT, DELTA_TWO_PHASE

#: Compared columns of a table of events: the record and its Kafka coordinates.
EVENTS = OutputSpec(columns=("event_id", "user_id", "amount", "event_time", "partition", "offset"))

#: The at-least-once job's running aggregate: one state row per user.
EWMA = OutputSpec(
    columns=("user_id", "ewma", "events"),
    final_state=FinalStateView(key=("user_id",), value=("ewma", "events")),
)


class KafkaToDeltaCase(RecoveryCase):
    """A job reading demo events from one Kafka topic and writing Delta tables under ``--out``.

    Parameters
    ----------
    events
        Records produced to the input topic (3 partitions, one in ``malformed_every`` bad).
    max_offsets_per_trigger
        Records per micro-batch, so the job runs several batches and a crash hits the middle.
    extra_args
        Further arguments of every run.
    cells
        The fault classes besides ``kill`` the job declares (:func:`cells`).
    """

    def __init__(
        self,
        name: str,
        module: str,
        crash: CrashPlan,
        outputs: Sequence[ExpectedOutput],
        description: str,
        events: int = 200,
        malformed_every: int = 25,
        max_offsets_per_trigger: int | None = 100,
        extra_args: Sequence[str] = (),
        cells: Mapping[FaultClass, FaultCell] | None = None,
    ) -> None:
        self.name = name
        self.cells = dict(cells or {})
        self.module = module
        self.crash = crash
        self.outputs = tuple(outputs)
        self.description = description
        self.events = events
        self.malformed_every = malformed_every
        self.max_offsets_per_trigger = max_offsets_per_trigger
        self.extra_args = tuple(extra_args)

    def prepare(self, ctx: HarnessContext) -> None:
        from connectors.demo_events import produce_events
        from connectors.kafka import create_topic

        create_topic(ctx.bootstrap, ctx.topic("in"), partitions=3)
        produce_events(
            ctx.bootstrap, ctx.topic("in"), self.events, malformed_every=self.malformed_every
        )

    def job_args(self, ctx: HarnessContext, slot: RunSlot) -> list[str]:
        args = run_args(ctx, slot)
        if self.max_offsets_per_trigger:
            args += ["--max-offsets-per-trigger", str(self.max_offsets_per_trigger)]
        return [*args, *self.extra_args]

    def read_output(self, ctx: HarnessContext, slot: RunSlot, output: str) -> list[dict[str, Any]]:
        spec = next(o.spec for o in self.outputs if o.name == output)
        return read_delta_rows(slot.out / output, spec.read_columns())


class ExactlyOnceDeltaCase(KafkaToDeltaCase):
    """:mod:`jobs.exactly_once_delta`: the same events into one table through a sink mode."""

    def __init__(
        self,
        name: str,
        mode: str,
        crash: CrashPlan,
        description: str,
        cells: Mapping[FaultClass, FaultCell] | None = None,
    ) -> None:
        super().__init__(
            name,
            "jobs.exactly_once_delta",
            crash,
            [ExpectedOutput("events", EVENTS, RecoveryClass.PRECISE)],
            description,
            extra_args=("--mode", mode),
            cells=cells,
        )

    def job_args(self, ctx: HarnessContext, slot: RunSlot) -> list[str]:
        args = ["--profile", ctx.profile, "--topic", ctx.topic("in")]
        args += ["--table", str(slot.out / "events"), "--checkpoint", str(slot.out / "_chk")]
        args += ["--sink-id", "events", "--max-offsets-per-trigger", "100"]
        return [*args, *self.extra_args]

    def expire_output(self, ctx: HarnessContext, slot: RunSlot, fault: FaultClass) -> None:
        """``txn-retention``: the table's ``txn`` expires (the sink's files stay);
        ``log-retention``: its log is trimmed to a checkpoint."""
        expire_delta(slot.out / "events", fault)


#: The Kafka -> Delta jobs, in the order :mod:`jobs.registry` lists them.
CASES: tuple[RecoveryCase, ...] = (
    KafkaToDeltaCase(
        "at_most_once",
        "jobs.at_most_once",
        CrashPlan.at(AT_MOST_ONCE_AFTER_OFFSET_COMMIT, 1),
        [ExpectedOutput("events", EVENTS, RecoveryClass.GAP)],
        "offsets committed before the write: a crash in between loses the batch",
        cells=cells(
            FaultCell(FaultClass.DRIVER_RAISE, AT_MOST_ONCE_AFTER_OFFSET_COMMIT, 1),
            # Its own offset log outlives the checkpoint: every replayed batch is skipped.
            FaultCell(FaultClass.CHECKPOINT_RESET, expected=PRECISE),
        ),
    ),
    KafkaToDeltaCase(
        "at_least_once",
        "jobs.at_least_once",
        CrashPlan.at(AT_LEAST_ONCE_AFTER_WRITE, 1),
        [
            ExpectedOutput("events", EVENTS, RecoveryClass.ROLLBACK_REPEATING),
            ExpectedOutput("ewma", EWMA, RecoveryClass.ROLLBACK_DIVERGENT),
        ],
        "rows written before the offsets are committed: a replayed batch is written again",
        cells=cells(
            FaultCell(FaultClass.DRIVER_RAISE, AT_LEAST_ONCE_AFTER_WRITE, 1),
            FaultCell(FaultClass.CHECKPOINT_RESET),  # every batch again: same classes
        ),
    ),
    ExactlyOnceDeltaCase(
        "exactly_once_delta",
        "two_phase",
        CrashPlan.at(DELTA_TWO_PHASE.fault(3), 1),
        "two-phase Delta sink: killed after its commit, the replay is recognised",
        cells=cells(
            FaultCell(FaultClass.TASK_RAISE, DELTA_TWO_PHASE.fault(1), 1),
            FaultCell(FaultClass.DRIVER_RAISE, DELTA_TWO_PHASE.fault(3), 1),
            FaultCell(FaultClass.CHECKPOINT_RESET, expected=OWNER_REFUSED),
            FaultCell(
                FaultClass.SPECULATION, DELTA_TWO_PHASE.fault(1), 1, seconds=5.0, partition=0
            ),
            *broker_cells(DELTA_TWO_PHASE.fault(3)),
            FaultCell(FaultClass.TXN_RETENTION, DELTA_TWO_PHASE.fault(3), 1, TXN_EXPIRED),
            # The txn lives on in the checkpoint: the replay is still recognised.
            FaultCell(FaultClass.LOG_RETENTION, DELTA_TWO_PHASE.fault(3), 1, PRECISE),
        ),
    ),
    ExactlyOnceDeltaCase(
        "exactly_once_delta_idempotent",
        "idempotent",
        CrashPlan.at(DELTA_IDEMPOTENT.fault(3), 1),
        "idempotent Delta sink (txnAppId/txnVersion): the replayed write is skipped",
        cells=cells(
            FaultCell(FaultClass.DRIVER_RAISE, DELTA_IDEMPOTENT.fault(3), 1),
            FaultCell(FaultClass.CHECKPOINT_RESET, expected=OWNER_REFUSED),
            FaultCell(FaultClass.TXN_RETENTION, DELTA_IDEMPOTENT.fault(3), 1, TXN_EXPIRED),
            FaultCell(FaultClass.LOG_RETENTION, DELTA_IDEMPOTENT.fault(3), 1, PRECISE),
        ),
    ),
)
