"""The recovery harness's cases of the guarantee jobs: :class:`JobCase`, one subclass per input
family, and what the families share (expected typed errors, cell builders, retention).

The cases themselves, with their cells, are one table in :mod:`jobs.registry`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import InitVar, dataclass, field
from typing import Any

from spark_ext import storage
from spark_ext.crash import FaultPoint
from spark_ext.recovery import (
    CrashPlan,
    ExpectedError,
    ExpectedOutput,
    FaultCell,
    FaultClass,
    HarnessContext,
    RecoveryCase,
    RecoveryClass,
    RunSlot,
    read_delta_rows,
)
from spark_ext.recovery.campaign import with_flag
from spark_ext.recovery.campaign_plan import Workload
from spark_ext.recovery.faults import Expectation
from spark_ext.sinks.errors import (
    DeltaTxnExpiredError,
    ReplayUnprovableError,
    SinkConfigError,
    SinkOwnerError,
)
from spark_ext.sinks.protocol import Protocol
from spark_ext.tracker.errors import CheckpointBehindAgent

#: The typed errors the cells declare (why each: docs/design.md, "Fault points").
OWNER_REFUSED = ExpectedError.of(SinkOwnerError)
BEHIND_AGENT = ExpectedError.of(CheckpointBehindAgent)
UNPROVABLE = ExpectedError.of(ReplayUnprovableError)
TXN_EXPIRED = ExpectedError.of(DeltaTxnExpiredError)
SPECULATION_REFUSED = ExpectedError.of(SinkConfigError)
PRECISE = RecoveryClass.PRECISE
#: How long the broker faults keep the broker paused (past kafka-python's default
#: ``delivery_timeout_ms`` of 120 s) or down.
BROKER_PAUSE_S = 130.0
BROKER_DOWN_S = 5.0
#: How long ``partition`` cuts a host from the broker and the store, and the liveness bound of
#: the host faults: the next batch commits within it after the heal or the loss.
PARTITION_S = 10.0
HOST_LIVENESS_S = 90.0
#: The liveness bound of ``slow-link``: the faulted run ends within it after the link slowed.
SLOW_LINK_LIVENESS_S = 120.0
#: How long ``store-errors`` fails a share of the store's requests, and its liveness bound.
STORE_ERRORS_S = 10.0
STORE_LIVENESS_S = 90.0
#: How long ``driver-partition`` cuts the driver from the broker and the store: the driver
#: leaves its point after the hold (5 s) and commits into the cut's second half.
DRIVER_PARTITION_S = 10.0


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


def host_cells(point: FaultPoint, batch: int = 1) -> tuple[FaultCell, FaultCell]:
    """Host loss and partition, acting on the host whose task of partition 0 reached ``point``."""
    lost = FaultCell(
        FaultClass.HOST_LOSS, point, batch, PRECISE, partition=0, bound_s=HOST_LIVENESS_S
    )
    return lost, dataclasses.replace(lost, fault=FaultClass.PARTITION, seconds=PARTITION_S)


def store_cell(trigger: FaultPoint, batch: int = 0) -> FaultCell:
    """The object store failing a share of its requests, from ``trigger`` reached in ``batch``."""
    return FaultCell(
        FaultClass.STORE_ERRORS, trigger, batch, PRECISE, STORE_ERRORS_S, bound_s=STORE_LIVENESS_S
    )


def driver_partition(point: FaultPoint, batch: int = 1) -> FaultCell:
    """The driver cut from the broker and the store once it reached ``point`` in ``batch``."""
    return FaultCell(
        FaultClass.DRIVER_PARTITION,
        point,
        batch,
        PRECISE,
        seconds=DRIVER_PARTITION_S,
        bound_s=HOST_LIVENESS_S,
    )


def driver_cells(
    point: FaultPoint,
    batch: int,
    reset: Expectation | Mapping[str, Expectation] | None = None,
    *extra: FaultCell,
) -> dict[FaultClass, FaultCell]:
    """The cells of a job killed at a driver ``point``: a raise there in ``batch``, and a
    checkpoint reset ending in ``reset`` (``None``: each output's class under ``kill``)."""
    raised = FaultCell(FaultClass.DRIVER_RAISE, point, batch)
    return cells(raised, FaultCell(FaultClass.CHECKPOINT_RESET, expected=reset), *extra)


def sink_cells(
    protocol: Protocol,
    *extra: FaultCell,
    task: int = 0,
    driver: int = 0,
    speculation: int = 0,
    broker: int = 0,
    txn: int = 0,
    log: int = 0,
    trim: int = 0,
    slow: int = 0,
    store: int = 0,
) -> dict[FaultClass, FaultCell]:
    """The cells of a job whose faults act at steps of one sink ``protocol``: each keyword is
    the step number of its fault class in batch 1 (broker and store faults and ``slow``: in
    batch 0; 0: no cell), with the sinks' outcomes (docs/design.md, "Fault points"); ``slow``:
    ``slow-link`` on the host of the task of partition 0 reaching the step, to the run's end;
    ``extra``: other cells."""
    declared: dict[FaultClass, tuple[int, dict[str, Any]]] = {
        FaultClass.TASK_RAISE: (task, {}),
        FaultClass.DRIVER_RAISE: (driver, {}),
        FaultClass.SPECULATION: (speculation, {"seconds": 5.0, "partition": 0}),
        FaultClass.TXN_RETENTION: (txn, {"expected": TXN_EXPIRED}),
        FaultClass.LOG_RETENTION: (log, {"expected": PRECISE}),
        FaultClass.OUTPUT_TRIM: (trim, {"expected": UNPROVABLE}),
        FaultClass.SLOW_LINK: (
            slow,
            {"batch": 0, "expected": PRECISE, "partition": 0, "bound_s": SLOW_LINK_LIVENESS_S},
        ),
    }
    steps = [
        FaultCell(f, protocol.fault(n), **{"batch": 1, **kw})
        for f, (n, kw) in declared.items()
        if n
    ]
    brokers = broker_cells(protocol.fault(broker)) if broker else ()
    stores = (store_cell(protocol.fault(store)),) if store else ()
    reset = FaultCell(FaultClass.CHECKPOINT_RESET, expected=OWNER_REFUSED)
    return cells(reset, *steps, *brokers, *stores, *extra)


@dataclass(eq=False, kw_only=True)
class JobCase(RecoveryCase):
    """A job read from the input topic ``ctx.topic("in")``, ``limit`` offsets a batch, writing
    Delta tables under ``--out``; a subclass produces its input (``prepare``).

    ``module`` defaults to ``jobs.<name>``; the ``kill`` run dies where the driver-raise cell
    raises unless ``kill`` says otherwise. ``tables``: the Delta tables retention acts on;
    ``catch_up``: the restart reads without the limit (one batch), so the recovered output
    comes from another batch plan than the clean one.
    """

    name: str
    outputs: tuple[ExpectedOutput, ...]
    description: str
    module: str = ""
    kill: InitVar[CrashPlan | None] = None
    crash: CrashPlan = field(init=False)
    cells: Mapping[FaultClass, FaultCell] = field(default_factory=dict)
    tables: tuple[str, ...] = ()
    extra_args: tuple[str, ...] = ()
    limit: int | None = 100
    catch_up: bool = False
    #: The campaign's drawn input (:func:`jobs.cases.campaign.variant`; ``None``: the case's own).
    workload: Workload | None = None

    def __post_init__(self, kill: CrashPlan | None) -> None:
        self.module = self.module or f"jobs.{self.name}"
        raised = self.cells.get(FaultClass.DRIVER_RAISE)
        if kill is None and raised is not None and raised.point is not None:
            kill = CrashPlan.at(raised.point, raised.batch)
        if kill is None:
            raise ValueError(f"{self.name}: no kill point (no driver-raise cell)")
        self.crash = kill

    def out_args(self, ctx: HarnessContext, slot: RunSlot) -> list[str]:
        """Where a run writes: ``--out`` (the tables and the checkpoint under it)."""
        return ["--out", slot.out]

    def job_args(self, ctx: HarnessContext, slot: RunSlot) -> list[str]:
        args = ["--profile", ctx.profile, "--topic", ctx.topic("in"), *self.out_args(ctx, slot)]
        if ctx.storage != "local":
            args += ["--storage", ctx.storage]  # the profile's own store, else conf/s3.toml's
        if self.limit:
            args += ["--max-offsets-per-trigger", str(self.limit)]
        args, w = [*args, *self.extra_args], self.workload
        if w is None:
            return args
        if "--sink-id" in args:
            # A part unique to the run in front (docs/design.md, "The randomized campaign").
            args = with_flag(args, "--sink-id", f"t{ctx.tag[-8:]}.{w.sink_id}")
        if "--partitions" in args:
            args = with_flag(args, "--partitions", str(w.partitions))
        return [*args, "--buckets", str(w.buckets)] if self.module == "jobs.dedup_delta" else args

    def restart_args(self, ctx: HarnessContext, slot: RunSlot) -> list[str]:
        args = self.job_args(ctx, slot)
        return with_flag(args, "--max-offsets-per-trigger", None) if self.catch_up else args

    def read_output(self, ctx: HarnessContext, slot: RunSlot, output: str) -> list[dict[str, Any]]:
        spec = next(o.spec for o in self.outputs if o.name == output)
        return read_delta_rows(slot.at(output), spec.read_columns(), ctx.settings)

    def expire_output(self, ctx: HarnessContext, slot: RunSlot, fault: FaultClass) -> None:
        """Retention on every Delta table of :attr:`tables` the runs created."""
        from spark_ext.recovery.retention import expire_txns, trim_delta_log

        expire = {FaultClass.TXN_RETENTION: expire_txns, FaultClass.LOG_RETENTION: trim_delta_log}
        if fault not in expire:
            raise ValueError(f"{fault} does not act on a Delta table")
        for table in self.tables:
            if storage.list_prefix(slot.at(table, "_delta_log"), ctx.settings):
                expire[fault](slot.at(table), ctx.settings)
