"""Cases of the tracker jobs: windows closed by the tracker instead of a watermark."""

from __future__ import annotations

from typing import Any

from jobs.cases.fault_cells import (
    BEHIND_AGENT,
    PRECISE,
    TXN_EXPIRED,
    broker_cells,
    cells,
    expire_delta,
    run_args,
)
from jobs.tracker_windows import EPOCH
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
from spark_ext.sinks.protocol import KAFKA_SLICED
from spark_ext.streaming.handler import AFTER_SINK as TRACKER_AFTER_SINK
from spark_ext.streaming.stages import GATE_EMITTED as TRACKER_GATE_EMITTED

#: The tracker job's windows: one row per (window, user).
WINDOWS = OutputSpec(
    columns=("window_start_ms", "window_end_ms", "key", "count", "sum_amount", "mean_amount")
)


#: ``disorder``: one row per input row, by the window it belongs to and its key.
WINDOW_OF_ROW = OutputSpec(columns=("window_start_ms", "key"))
#: ``disorder``: the demo input's jitter inside a partition, and the disorder it is promised.
JITTER_MS, PROMISED_DISORDER_MS = 6_000, 1_000
WINDOW_MS = 10_000
EPOCH_MS = int(EPOCH.timestamp() * 1000)


def window_start_ms(event_time_ms: int) -> int:
    """Start of the 10 s tumbling window of :mod:`jobs.tracker_windows` holding the time."""
    return event_time_ms - event_time_ms % WINDOW_MS


class TrackerWindowsCase(RecoveryCase):
    """:mod:`jobs.tracker_windows` on its own demo input (time-ordered partitions, closed).

    ``disorder``: the same demo events jittered by up to :data:`JITTER_MS` inside each
    partition while the job is promised :data:`PROMISED_DISORDER_MS`; every input row must be
    in exactly one window count or one late row.
    """

    accounting: OutputSpec | None = WINDOW_OF_ROW

    def __init__(self, events: int = 150, partitions: int = 3, max_offsets: int = 60) -> None:
        self.name = "tracker_windows"
        self.module = "jobs.tracker_windows"
        self.crash = CrashPlan.at(TRACKER_AFTER_SINK, 1)
        self.cells = cells(
            # Attempt 0 of every gate task of batch 1 raises after sending its rows.
            FaultCell(FaultClass.TASK_RAISE, TRACKER_GATE_EMITTED, 1),
            FaultCell(FaultClass.DRIVER_RAISE, TRACKER_AFTER_SINK, 1),
            # A gate task of batch 1 straggles after sending its rows; a copy races it.
            FaultCell(FaultClass.SPECULATION, TRACKER_GATE_EMITTED, 1, seconds=5.0, partition=1),
            # The agent outlives the checkpoint: the tracker refuses to run behind it.
            FaultCell(FaultClass.CHECKPOINT_RESET, expected=BEHIND_AGENT),
            FaultCell(FaultClass.DISORDER, expected=PRECISE),
            # The txn is the writer's replay evidence: once it expired the replay must be
            # refused, not written again.
            FaultCell(FaultClass.TXN_RETENTION, TRACKER_AFTER_SINK, 1, TXN_EXPIRED),
            FaultCell(FaultClass.LOG_RETENTION, TRACKER_AFTER_SINK, 1, PRECISE),
        )
        self.outputs = (ExpectedOutput("windows", WINDOWS, RecoveryClass.PRECISE),)
        self.description = "windows released by the tracker, written idempotently per batch"
        self.events, self.partitions, self.max_offsets = events, partitions, max_offsets

    def prepare(self, ctx: HarnessContext) -> None:
        from connectors.kafka import create_topic, produce
        from jobs.tracker_windows import demo_records

        create_topic(ctx.bootstrap, ctx.topic("in"), self.partitions)
        produce(ctx.bootstrap, ctx.topic("in"), demo_records(self.events, self.partitions))

    def job_args(self, ctx: HarnessContext, slot: RunSlot) -> list[str]:
        return [
            *run_args(ctx, slot),
            *(
                "--partitions",
                str(self.partitions),
                "--max-offsets-per-trigger",
                str(self.max_offsets),
            ),
        ]

    def read_output(self, ctx: HarnessContext, slot: RunSlot, output: str) -> list[dict[str, Any]]:
        return read_delta_rows(slot.out / output, WINDOWS.read_columns())

    def expire_output(self, ctx: HarnessContext, slot: RunSlot, fault: FaultClass) -> None:
        """Retention on both Delta tables the job appends to (``windows`` and ``late``)."""
        for table in ("windows", "late"):
            if (slot.out / table / "_delta_log").is_dir():
                expire_delta(slot.out / table, fault)

    def prepare_disordered(self, ctx: HarnessContext) -> list[dict[str, Any]]:
        from connectors.kafka import create_topic, produce
        from jobs.tracker_windows import demo_records, demo_time

        create_topic(ctx.bootstrap, ctx.topic("in"), self.partitions)
        records = list(demo_records(self.events, self.partitions, jitter_ms=JITTER_MS))
        produce(ctx.bootstrap, ctx.topic("in"), records)
        events = [key.decode() for key, _, _ in records if key is not None]
        return [
            {
                "window_start_ms": window_start_ms(EPOCH_MS + demo_time(i, jitter_ms=JITTER_MS)),
                "key": key,
            }
            for i, key in enumerate(events)
        ]

    def disorder_args(self, ctx: HarnessContext, slot: RunSlot) -> list[str]:
        return [*self.job_args(ctx, slot), "--disorder-ms", str(PROMISED_DISORDER_MS)]

    def accounted_rows(
        self, ctx: HarnessContext, slot: RunSlot
    ) -> tuple[list[dict[str, Any]], int]:
        windows = read_delta_rows(slot.out / "windows", ("window_start_ms", "key", "count"))
        late = read_delta_rows(slot.out / "late", ("key", "event_time_ms"))
        rows = [
            {"window_start_ms": w["window_start_ms"], "key": w["key"]}
            for w in windows
            for _ in range(int(w["count"]))
        ]
        rows += [
            {"window_start_ms": window_start_ms(int(r["event_time_ms"])), "key": r["key"]}
            for r in late
        ]
        return rows, len(late)


#: The two-query tracker job's downstream totals: one row per window.
TOTALS = OutputSpec(
    columns=("window_start_ms", "window_end_ms", "key", "users", "events", "amount")
)


#: ``disorder`` of the two-query job: one row per input row, by its window (the downstream
#: totals are per window, over every user).
WINDOW_OF_INPUT = OutputSpec(columns=("window_start_ms",))


class TrackerTwoQueriesCase(TrackerWindowsCase):
    """:mod:`jobs.tracker_two_queries`: its middle topic and Kafka agent are per run.

    ``disorder``: the upstream is promised ordered partitions (the job has no disorder
    setting) and gets the jittered demo input; each input row must be counted once in its
    window's downstream ``events`` or be one upstream late row (``late_up``).
    """

    accounting: OutputSpec | None = WINDOW_OF_INPUT

    def __init__(self) -> None:
        super().__init__(events=90, max_offsets=40)
        self.name = "tracker_two_queries"
        self.module = "jobs.tracker_two_queries"
        self.outputs = (ExpectedOutput("totals", TOTALS, RecoveryClass.PRECISE),)
        self.description = "downstream windows closed by the upstream query's tracker"
        # The retention cells act on the one-query job's tables: not declared here (yet).
        upstream_only = {FaultClass.TXN_RETENTION, FaultClass.LOG_RETENTION}
        own = {f: c for f, c in self.cells.items() if f not in upstream_only}
        # The upstream forwards its rows through the two-phase Kafka writer (a transaction
        # per slice): a slice task of batch 1 straggles inside its transaction and a
        # speculative copy races it; the copy's init fences the straggler.
        straggler = FaultCell(
            FaultClass.SPECULATION, KAFKA_SLICED.fault(2), 1, seconds=5.0, partition=0
        )
        self.cells = {**own, **cells(straggler, *broker_cells(TRACKER_AFTER_SINK))}

    def job_args(self, ctx: HarnessContext, slot: RunSlot) -> list[str]:
        return [
            *super().job_args(ctx, slot),
            *("--mid-topic", ctx.topic(f"mid-{slot.name}")),
            *("--agent", f"{ctx.tag}-{slot.name}"),
        ]

    def read_output(self, ctx: HarnessContext, slot: RunSlot, output: str) -> list[dict[str, Any]]:
        return read_delta_rows(slot.out / output, TOTALS.read_columns())

    def prepare_disordered(self, ctx: HarnessContext) -> list[dict[str, Any]]:
        rows = super().prepare_disordered(ctx)
        return [{"window_start_ms": r["window_start_ms"]} for r in rows]

    def disorder_args(self, ctx: HarnessContext, slot: RunSlot) -> list[str]:
        return self.job_args(ctx, slot)  # the promise: ordered partitions

    def accounted_rows(
        self, ctx: HarnessContext, slot: RunSlot
    ) -> tuple[list[dict[str, Any]], int]:
        totals = read_delta_rows(slot.out / "totals", ("window_start_ms", "events"))
        late = read_delta_rows(slot.out / "late_up", ("event_time_ms",))
        rows = [
            {"window_start_ms": t["window_start_ms"]}
            for t in totals
            for _ in range(int(t["events"]))
        ]
        rows += [{"window_start_ms": window_start_ms(int(r["event_time_ms"]))} for r in late]
        return rows, len(late)


#: The tracker jobs, in the order :mod:`jobs.registry` lists them.
CASES: tuple[RecoveryCase, ...] = (TrackerWindowsCase(), TrackerTwoQueriesCase())
