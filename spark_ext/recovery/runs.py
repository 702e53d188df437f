"""The runs every fault cell is built from: a fresh context, the clean run, the restart, the
results (steps 1 and 3 of :mod:`spark_ext.recovery.harness`)."""

from __future__ import annotations

import logging
import re
import shutil
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from spark_ext import storage
from spark_ext.crash import FAULT_LOG_ENV, fault_log_entries
from spark_ext.jobrun import JobRun, run_job
from spark_ext.recovery.case import HarnessContext, RecoveryCase, RecoveryResult, RunSlot, under
from spark_ext.recovery.classification import Comparison, classify
from spark_ext.recovery.errors import (
    EmptyCleanOutput,
    FaultNotFired,
    JobRunFailed,
    observed_error,
    typed_error_names,
)
from spark_ext.recovery.faults import Expectation, FaultCell, FaultClass
from spark_ext.recovery.profiles import resolve_profile

__all__ = ["CleanRun", "JobRuns", "Runner", "compare", "judge", "typed_error"]

log = logging.getLogger(__name__)

Runner = Callable[..., JobRun]


@dataclass(frozen=True)
class CleanRun:
    """A clean run's context, slot, rows per output and duration (shared by a job's cells)."""

    ctx: HarnessContext
    slot: RunSlot
    rows: dict[str, list[dict[str, Any]]]
    seconds: float


@dataclass(eq=False)
class JobRuns:
    """Run a case's job: into a fresh context, clean, and restarted after a fault (fields:
    :class:`~spark_ext.recovery.harness.RecoveryHarness`)."""

    workdir: Path
    bootstrap: str
    profile: str = "test"
    runner: Runner = run_job
    timeout_s: float = 600.0
    clean_runner: Runner | None = None
    fault_profile: str = "faults"
    out_root: str = ""
    storage: storage.StorageSettings | None = None

    def __post_init__(self) -> None:
        self.workdir = Path(self.workdir).resolve()
        self.profile = resolve_profile(self.profile)
        self.fault_profile = resolve_profile(self.fault_profile)

    def context(self, case: RecoveryCase, folder: str | None = None) -> HarnessContext:
        """A fresh, emptied context for ``case``: its folder (and its outputs' location) and
        a unique topic tag."""
        tag = re.sub(r"[^a-zA-Z0-9-]", "-", f"rec-{case.name}-{uuid.uuid4().hex[:8]}")
        name = folder or case.name
        out = under(self.out_root, name) if self.out_root else ""
        ctx = HarnessContext(
            self.workdir / name, self.bootstrap, self.profile, tag, out, self.storage
        )
        shutil.rmtree(ctx.workdir, ignore_errors=True)  # a previous check's checkpoints
        if out:
            storage.delete(out, self.storage)
        ctx.workdir.mkdir(parents=True)
        return ctx

    def clean_run(
        self, case: RecoveryCase, ctx: HarnessContext, runner: Runner | None = None
    ) -> CleanRun:
        """Run ``case`` clean into ``ctx``'s ``clean`` slot and read every output (non-empty)."""
        slot = ctx.slot("clean")
        run = (runner or self.clean_runner or self.runner)(
            case.module, case.job_args(ctx, slot), timeout_s=self.timeout_s
        )
        if not run.ok:
            raise JobRunFailed(case.name, "clean", run)
        rows = {o.name: case.read_output(ctx, slot, o.name) for o in case.outputs}
        for name, got in rows.items():
            if not got:
                raise EmptyCleanOutput(case.name, name, str(slot.out))
        return CleanRun(ctx, slot, rows, run.seconds)

    def fault_run(
        self,
        case: RecoveryCase,
        cell: FaultCell,
        ctx: HarnessContext,
        args: Sequence[str] | None = None,
    ) -> JobRun:
        """Run ``case`` under ``cell`` on a fresh slot named for its fault, seen firing
        (``args``: the job's arguments, :meth:`RecoveryCase.job_args` by default)."""
        slot = ctx.slot(str(cell.fault))
        storage.delete(slot.out, ctx.settings)
        log.info("%s: %s", case.name, cell.describe())
        traced = {"trace": True} if cell.fault is FaultClass.SPECULATION else {}
        args = case.job_args(ctx, slot) if args is None else args
        run = self.runner(case.module, args, fault=cell.spec(), timeout_s=self.timeout_s, **traced)
        kind = cell.kind
        if cell.point and kind and not run.fired(cell.point.name, kind.value):
            raise FaultNotFired(case.name, cell.describe(), run)
        return run

    def run_acting(
        self,
        case: RecoveryCase,
        cell: FaultCell,
        args: Sequence[str],
        fault_log: Path,
        act: Callable[[list[dict[str, object]]], bool],
    ) -> JobRun:
        """Run ``case`` with ``args`` under ``cell``, its faults logged to ``fault_log``, calling
        ``act`` with the log's entries every 0.2 s until it returns ``True`` (it acted);
        :class:`FaultNotFired` if it never did."""
        env = {FAULT_LOG_ENV: str(fault_log)}
        with ThreadPoolExecutor(max_workers=1) as pool:
            pending = pool.submit(
                self.runner, case.module, args, fault=cell.spec(), env=env, timeout_s=self.timeout_s
            )
            acted = False
            while not pending.done():
                acted = acted or act(fault_log_entries(fault_log))
                time.sleep(0.2)
        if not acted:
            raise FaultNotFired(case.name, cell.describe(), pending.result())
        return pending.result()

    def restart(self, case: RecoveryCase, fault: FaultClass, args: Sequence[str]) -> JobRun:
        """Run ``case`` again after ``fault``; :class:`JobRunFailed` unless it finishes."""
        again = self.runner(case.module, args, timeout_s=self.timeout_s)
        if not again.ok:
            raise JobRunFailed(case.name, f"{fault} restarted", again)
        return again

    def restart_and_compare(
        self,
        case: RecoveryCase,
        ctx: HarnessContext,
        slot: RunSlot,
        clean: CleanRun,
        run: JobRun,
        fault: FaultClass,
        described: str,
    ) -> list[RecoveryResult]:
        """Restart ``run`` from its checkpoint unless it finished; classify each output of
        ``slot`` against ``clean`` (``O_f + O'`` against ``O_e``)."""
        seconds = {"clean": clean.seconds, "fault": run.seconds}
        before = {o.name: len(case.read_output(ctx, slot, o.name)) for o in case.outputs}
        note = "finished on its own"
        if not run.ok:
            error = observed_error(run.output_tail, typed_error_names())
            note = "killed" if run.killed else f"failed ({error or 'untyped error'})"
            log.info("%s: %s; restart from the checkpoint", case.name, note)
            again = self.restart(case, fault, case.restart_args(ctx, slot))
            seconds["restarted"] = again.seconds
            note += ", restarted"
        compared = compare(case, ctx, slot, clean.rows, before)
        return judge(case, fault, described, compared, seconds, note)


def compare(
    case: RecoveryCase,
    ctx: HarnessContext,
    slot: RunSlot,
    reference: Mapping[str, Sequence[Mapping[str, Any]]],
    before: Mapping[str, int] | None = None,
) -> dict[str, tuple[Comparison, int]]:
    """Each output of ``slot`` classified against ``reference`` (``O_f + O'`` against ``O_e``),
    with its rows before the restart (``before``; none: 0)."""
    return {
        o.name: (
            classify(reference[o.name], case.read_output(ctx, slot, o.name), o.spec),
            (before or {}).get(o.name, 0),
        )
        for o in case.outputs
    }


def judge(
    case: RecoveryCase,
    fault: FaultClass,
    described: str,
    compared: Mapping[str, tuple[Comparison, int]],
    seconds: Mapping[str, float],
    note: str,
    error: str | None = None,
    expected: Mapping[str, Expectation] | None = None,
) -> list[RecoveryResult]:
    """One logged result per output of ``compared`` (its comparison, its rows before the
    restart), against ``expected`` (default: what ``case`` declares under ``fault``)."""
    expected = case.expected(fault) if expected is None else expected
    results = []
    for name, (comparison, before) in compared.items():
        result = RecoveryResult(
            case.name,
            name,
            expected[name],
            described,
            comparison,
            before,
            dict(seconds),
            fault=fault,
            error=error,
            note=note,
        )
        log.info("%s %s: %s (expected %s)", result.label, fault, result.observed, result.expected)
        results.append(result)
    return results


def typed_error(case: RecoveryCase, phase: str, run: JobRun) -> str | None:
    """The typed error ``run`` stopped with (``None``: it ran to its end); an untyped failure
    is :class:`JobRunFailed`."""
    error = None if run.ok else observed_error(run.output_tail, typed_error_names())
    if not run.ok and error is None:
        raise JobRunFailed(case.name, f"{phase} (no typed error named)", run)
    return error
