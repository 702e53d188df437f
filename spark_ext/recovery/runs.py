"""The runs every fault cell is built from: a fresh context, the clean run, the restart.

:class:`JobRuns` holds steps 1 and 3 of :mod:`spark_ext.recovery.harness`; the harness and the
modules injecting faults outside a job build on it.
"""

from __future__ import annotations

import logging
import re
import shutil
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from spark_ext.jobrun import JobRun
from spark_ext.recovery.case import HarnessContext, RecoveryCase, RecoveryResult, RunSlot
from spark_ext.recovery.classification import classify
from spark_ext.recovery.errors import EmptyCleanOutput, FaultNotFired, JobRunFailed
from spark_ext.recovery.faults import FaultCell, FaultClass, observed_error
from spark_ext.recovery.profiles import typed_error_names

__all__ = ["CleanRun", "JobRuns", "Runner", "assert_fired"]

log = logging.getLogger(__name__)

Runner = Callable[..., JobRun]


@dataclass(frozen=True)
class CleanRun:
    """A clean run's context, slot, rows per output and duration (shared by a job's cells)."""

    ctx: HarnessContext
    slot: RunSlot
    rows: dict[str, list[dict[str, Any]]]
    seconds: float


class JobRuns:
    """Run a case's job: into a fresh context, clean, and restarted after a fault.

    Settings: :class:`~spark_ext.recovery.harness.RecoveryHarness`'s parameters.
    """

    workdir: Path
    bootstrap: str
    profile: str
    fault_profile: str
    runner: Runner
    clean_runner: Runner
    timeout_s: float

    def context(self, case: RecoveryCase, folder: str | None = None) -> HarnessContext:
        """A fresh, emptied context for ``case``: its folder and a unique topic tag."""
        tag = re.sub(r"[^a-zA-Z0-9-]", "-", f"rec-{case.name}-{uuid.uuid4().hex[:8]}")
        ctx = HarnessContext(
            self.workdir / (folder or case.name), self.bootstrap, self.profile, tag
        )
        shutil.rmtree(ctx.workdir, ignore_errors=True)  # a previous check's checkpoints
        ctx.workdir.mkdir(parents=True)
        return ctx

    def clean_run(
        self, case: RecoveryCase, ctx: HarnessContext, runner: Runner | None = None
    ) -> CleanRun:
        """Run ``case`` clean into ``ctx``'s ``clean`` slot and read every output (non-empty)."""
        slot = RunSlot("clean", ctx.workdir / "clean")
        run = (runner or self.clean_runner)(
            case.module, case.job_args(ctx, slot), timeout_s=self.timeout_s
        )
        if not run.ok:
            raise JobRunFailed(case.name, "clean", run)
        rows = {o.name: case.read_output(ctx, slot, o.name) for o in case.outputs}
        for name, got in rows.items():
            if not got:
                raise EmptyCleanOutput(case.name, name, str(slot.out))
        return CleanRun(ctx, slot, rows, run.seconds)

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
            again = self.runner(case.module, case.restart_args(ctx, slot), timeout_s=self.timeout_s)
            seconds["restarted"] = again.seconds
            if not again.ok:
                raise JobRunFailed(case.name, f"{fault} restarted", again)
            note += ", restarted"
        expected = case.expected(fault)
        results = []
        for out in case.outputs:
            comparison = classify(
                clean.rows[out.name], case.read_output(ctx, slot, out.name), out.spec
            )
            result = RecoveryResult(
                case.name,
                out.name,
                expected[out.name],
                described,
                comparison,
                before[out.name],
                seconds,
                fault=fault,
                note=note,
            )
            log.info(
                "%s %s: %s (expected %s)",
                result.label,
                fault,
                result.observed,
                result.expected_label,
            )
            results.append(result)
        return results


def assert_fired(job: str, cell: FaultCell, run: JobRun) -> None:
    """Raise :class:`FaultNotFired` unless ``run``'s fault log shows ``cell``'s fault firing."""
    kind = cell.kind
    if cell.point is None or kind is None:
        return
    if not run.fired(cell.point.name, kind.value):
        raise FaultNotFired(job, cell.describe(), run)
