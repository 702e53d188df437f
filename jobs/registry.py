"""Which guarantee jobs exist, how the recovery harness feeds and reads them, and their classes.

Every job here is a module of ``jobs/`` runnable as ``python -m jobs.X``, ``spark-ext run X``
and ``spark-submit jobs/X.py`` (``scripts/submit.sh``). Each entry is a
:class:`~spark_ext.recovery.RecoveryCase`: the input it reads, where it crashes, which of its
outputs are compared (on which columns) and the recovery class each output should get under
a SIGKILL; and, per further fault class (:class:`~spark_ext.recovery.FaultClass`), the
declared fault point where the fault is injected and the outcome the job's guarantee promises
(a recovery class or a typed error such as ``BatchRegressionError``). Fault points are the
objects their modules declare, never strings repeated here.

Example
-------
>>> from jobs import registry
>>> [o.expected.value for o in registry.get("at_most_once").outputs]
['gap']
>>> sorted(registry.names())[:2]
['at_least_once', 'at_most_once']
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from jobs.at_least_once import AFTER_WRITE as AT_LEAST_ONCE_AFTER_WRITE
from jobs.at_most_once import AFTER_OFFSET_COMMIT as AT_MOST_ONCE_AFTER_OFFSET_COMMIT
from jobs.eo_spark_kafka_sink import WRITTEN as SPARK_KAFKA_WRITTEN
from jobs.tracker_windows import EPOCH
from jobs.upsert_totals import AFTER_UPSERT
from spark_ext.crash import FaultPoint
from spark_ext.dedup import AFTER_OUTPUT as DEDUP_AFTER_OUTPUT
from spark_ext.dedup import DEDUP_DELTA
from spark_ext.errors import SparkExtError
from spark_ext.recovery import (
    CrashPlan,
    ExpectedError,
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
from spark_ext.sinks.errors import (
    BatchRegressionError,
    DeltaTxnExpiredError,
    ReplayUnprovableError,
)
from spark_ext.sinks.protocol import (
    DELTA_IDEMPOTENT,
    DELTA_TWO_PHASE,
    KAFKA_IDEMPOTENT,
    KAFKA_SLICED,
    KAFKA_TWO_PHASE,
)
from spark_ext.tracked.handler import AFTER_SINK as TRACKER_AFTER_SINK
from spark_ext.tracked.stages import GATE_EMITTED as TRACKER_GATE_EMITTED
from spark_ext.tracker.errors import CheckpointBehindAgent

#: The typed error a checkpoint reset must end in when the output is kept (invariant 6).
REGRESSION = ExpectedError.of(BatchRegressionError)
#: The tracker's: its agent applied batches the reset checkpoint never reached.
BEHIND_AGENT = ExpectedError.of(CheckpointBehindAgent)
#: A replay whose evidence (the output topic) retention trimmed (invariant 6).
UNPROVABLE = ExpectedError.of(ReplayUnprovableError)
#: A Delta output whose ``txn`` retention expired next to the sink's committed files.
TXN_EXPIRED = ExpectedError.of(DeltaTxnExpiredError)
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


class UnknownJobError(SparkExtError, KeyError):
    """No job of that name is registered; the message lists the known ones."""

    def __init__(self, name: str, known: Sequence[str]) -> None:
        self.name = name
        super().__init__(f"no job {name!r} (known: {', '.join(sorted(known))})")

    def __str__(self) -> str:
        return str(self.args[0])


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
        args = ["--profile", ctx.profile, "--topic", ctx.topic("in"), "--out", str(slot.out)]
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


#: A Kafka -> Kafka job's output record, by the input record it names.
FORWARDED = OutputSpec(columns=("key", "src_partition", "src_offset", "src_value"))


class KafkaToKafkaCase(KafkaToDeltaCase):
    """A job forwarding demo events to an output topic per run (``--out``, ``--checkpoint``).

    Output records are read ``read_committed`` and compared by the input record their JSON
    value names (``{"topic", "partition", "offset", "value"}``), not by their own offsets.
    """

    def job_args(self, ctx: HarnessContext, slot: RunSlot) -> list[str]:
        args = ["--profile", ctx.profile, "--topic", ctx.topic("in")]
        args += ["--out", ctx.topic(f"out-{slot.name}"), "--checkpoint", str(slot.out / "_chk")]
        args += ["--max-offsets-per-trigger", "100"]
        return [*args, *self.extra_args]

    def expire_output(self, ctx: HarnessContext, slot: RunSlot, fault: FaultClass) -> None:
        """``output-trim``: every record written to the run's output topic so far is trimmed."""
        from spark_ext.recovery.retention import trim_topic

        if fault is not FaultClass.OUTPUT_TRIM:
            super().expire_output(ctx, slot, fault)
        trim_topic(ctx.bootstrap, ctx.topic(f"out-{slot.name}"))

    def read_output(self, ctx: HarnessContext, slot: RunSlot, output: str) -> list[dict[str, Any]]:
        import json

        from connectors.kafka import consume_all, create_topic

        topic = ctx.topic(f"out-{slot.name}")
        create_topic(ctx.bootstrap, topic, 3)  # no-op once the job made it
        rows = []
        for _partition, _offset, key, value in consume_all(ctx.bootstrap, topic):
            src = json.loads(value)
            rows.append(
                {
                    "key": key.decode() if key is not None else None,
                    "src_partition": src["partition"],
                    "src_offset": src["offset"],
                    "src_value": src["value"],
                }
            )
        return rows


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
            *("--profile", ctx.profile, "--topic", ctx.topic("in")),
            *("--partitions", str(self.partitions), "--out", str(slot.out)),
            *("--max-offsets-per-trigger", str(self.max_offsets)),
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
        self.cells = {**own, **cells(*broker_cells(TRACKER_AFTER_SINK))}

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


class OrderingCase(RecoveryCase):
    """:mod:`jobs.ordering_dedup` on sensor readings spread over two partitions.

    Every run reads in batches of ``limit`` offsets; the restart after the kill catches up
    the backlog in one batch (no limit), as a restart after downtime does. So the recovered
    output was computed under another batch plan than the clean one: only an order fixed by
    the buffer makes them equal.
    """

    def __init__(
        self,
        name: str,
        expected: RecoveryClass,
        description: str,
        extra_args: Sequence[str] = (),
        duplicate_every: int = 0,
        limit: int = 50,
        cells: Mapping[FaultClass, FaultCell] | None = None,
    ) -> None:
        self.name = name
        self.module = "jobs.ordering_dedup"
        self.crash = CrashPlan.at(DEDUP_AFTER_OUTPUT, 0)
        self.cells = dict(cells or {})
        self.outputs = (ExpectedOutput("ewma", READINGS, expected),)
        self.description = description
        self.extra_args = tuple(extra_args)
        self.duplicate_every = duplicate_every
        self.limit = limit

    def prepare(self, ctx: HarnessContext) -> None:
        from connectors.kafka import create_topic
        from jobs.ordering_dedup import produce_readings

        create_topic(ctx.bootstrap, ctx.topic("in"), 2)
        produce_readings(
            ctx.bootstrap,
            ctx.topic("in"),
            sensors=4,
            per_sensor=30,
            partitions=2,
            duplicate_every=self.duplicate_every,
        )

    def restart_args(self, ctx: HarnessContext, slot: RunSlot) -> list[str]:
        return [
            *("--profile", ctx.profile, "--topic", ctx.topic("in"), "--partitions", "2"),
            *("--out", str(slot.out), *self.extra_args),
        ]

    def job_args(self, ctx: HarnessContext, slot: RunSlot) -> list[str]:
        return [*self.restart_args(ctx, slot), "--max-offsets-per-trigger", str(self.limit)]

    def read_output(self, ctx: HarnessContext, slot: RunSlot, output: str) -> list[dict[str, Any]]:
        return read_delta_rows(slot.out / output, READINGS.read_columns())


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
            FaultCell(FaultClass.CHECKPOINT_RESET, expected=REGRESSION),
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
        return ["--profile", ctx.profile, "--topic", ctx.topic("in"), "--out", str(slot.out)]


JOBS: dict[str, RecoveryCase] = {
    case.name: case
    for case in (
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
                FaultCell(FaultClass.CHECKPOINT_RESET, expected=REGRESSION),
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
                FaultCell(FaultClass.CHECKPOINT_RESET, expected=REGRESSION),
                FaultCell(FaultClass.TXN_RETENTION, DELTA_IDEMPOTENT.fault(3), 1, TXN_EXPIRED),
                FaultCell(FaultClass.LOG_RETENTION, DELTA_IDEMPOTENT.fault(3), 1, PRECISE),
            ),
        ),
        KafkaToKafkaCase(
            "exactly_once_kafka",
            "jobs.exactly_once_kafka",
            CrashPlan.at(KAFKA_SLICED.fault(3), 1),
            [ExpectedOutput("forwarded", FORWARDED, RecoveryClass.PRECISE)],
            "two-phase Kafka sink, a transaction per task: committed slices are recognised",
            extra_args=("--sink-id", "forwarded", "--mode", "two_phase", "--atomicity", "slice"),
            cells=cells(
                # attempt 0 committed its slice, then failed: attempt 1 finds it committed
                FaultCell(FaultClass.TASK_RAISE, KAFKA_SLICED.fault(3), 1),
                FaultCell(FaultClass.DRIVER_RAISE, KAFKA_SLICED.fault(4), 1),
                # the tasks find their slice records ahead of the reset checkpoint's batches
                FaultCell(FaultClass.CHECKPOINT_RESET, expected=REGRESSION),
                FaultCell(
                    FaultClass.SPECULATION, KAFKA_SLICED.fault(2), 1, seconds=5.0, partition=0
                ),
                *broker_cells(KAFKA_SLICED.fault(4)),
                # The slice records are in the transactions: the replay is recognised without
                # the records retention trimmed.
                FaultCell(FaultClass.OUTPUT_TRIM, KAFKA_SLICED.fault(3), 1, PRECISE),
            ),
        ),
        KafkaToKafkaCase(
            "exactly_once_kafka_batch",
            "jobs.exactly_once_kafka",
            CrashPlan.at(KAFKA_TWO_PHASE.fault(3), 1),
            [ExpectedOutput("forwarded", FORWARDED, RecoveryClass.PRECISE)],
            "two-phase Kafka sink, one transaction per batch: the replay is recognised",
            extra_args=("--sink-id", "forwarded", "--mode", "two_phase", "--atomicity", "batch"),
            cells=cells(
                FaultCell(FaultClass.TASK_RAISE, KAFKA_TWO_PHASE.fault(1), 1),
                FaultCell(FaultClass.DRIVER_RAISE, KAFKA_TWO_PHASE.fault(3), 1),
                FaultCell(FaultClass.CHECKPOINT_RESET, expected=REGRESSION),
                FaultCell(
                    FaultClass.SPECULATION, KAFKA_TWO_PHASE.fault(1), 1, seconds=5.0, partition=0
                ),
                *broker_cells(KAFKA_TWO_PHASE.fault(3)),
                # The batch id is in the transaction: the replay is recognised without the
                # records retention trimmed.
                FaultCell(FaultClass.OUTPUT_TRIM, KAFKA_TWO_PHASE.fault(3), 1, PRECISE),
            ),
        ),
        KafkaToKafkaCase(
            "exactly_once_kafka_idempotent",
            "jobs.exactly_once_kafka",
            CrashPlan.at(KAFKA_IDEMPOTENT.fault(3), 1),
            [ExpectedOutput("forwarded", FORWARDED, RecoveryClass.PRECISE)],
            "idempotent Kafka sink: a replay re-sends only the record ids not yet in the topic",
            extra_args=("--sink-id", "forwarded", "--mode", "idempotent"),
            cells=cells(
                FaultCell(FaultClass.TASK_RAISE, KAFKA_IDEMPOTENT.fault(2), 1),
                FaultCell(FaultClass.DRIVER_RAISE, KAFKA_IDEMPOTENT.fault(3), 1),
                FaultCell(FaultClass.CHECKPOINT_RESET, expected=REGRESSION),
                # The replay is proven by reading back what it wrote: once retention trimmed
                # that, it is refused, never guessed.
                FaultCell(FaultClass.OUTPUT_TRIM, KAFKA_IDEMPOTENT.fault(3), 1, UNPROVABLE),
            ),
        ),
        KafkaToKafkaCase(
            "spark_kafka_sink",
            "jobs.eo_spark_kafka_sink",
            CrashPlan.at(SPARK_KAFKA_WRITTEN, 1),
            [ExpectedOutput("forwarded", FORWARDED, RecoveryClass.ROLLBACK_REPEATING)],
            "negative control: Spark's own Kafka writer writes a replayed batch again",
            cells=cells(
                FaultCell(FaultClass.DRIVER_RAISE, SPARK_KAFKA_WRITTEN, 1),
                FaultCell(FaultClass.CHECKPOINT_RESET),
            ),
        ),
        TrackerWindowsCase(),
        TrackerTwoQueriesCase(),
        OrderingCase(
            "ordering_dedup",
            RecoveryClass.PRECISE,
            "ordering buffer + dedup + EWMA: same output under another batch plan",
            duplicate_every=5,
            cells=cells(
                FaultCell(FaultClass.DRIVER_RAISE, DEDUP_AFTER_OUTPUT, 0),
                FaultCell(FaultClass.CHECKPOINT_RESET, expected=REGRESSION),
            ),
        ),
        OrderingCase(
            "ordering_no_buffer",
            RecoveryClass.ROLLBACK_DIVERGENT,
            "EWMA folded in arrival order (--no-buffer): another batch plan, other values",
            extra_args=("--no-buffer", "--no-dedup"),
        ),
        DedupDeltaCase(),
        UpsertTotalsCase(),
    )
}


def names() -> list[str]:
    """Names of the registered jobs."""
    return list(JOBS)


def get(name: str) -> RecoveryCase:
    """The registered job ``name``; :class:`UnknownJobError` if there is none."""
    try:
        return JOBS[name]
    except KeyError:
        raise UnknownJobError(name, list(JOBS)) from None
