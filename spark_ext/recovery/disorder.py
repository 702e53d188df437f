"""The ``disorder`` fault: input whose event times break the partitions' promise.

docs/design.md invariant 7. The input is jittered beyond ``--disorder-ms`` (killed and
restarted at the cell's point, if any); ``precise`` means every input row is accounted for once,
in an output row or a late row. No late row at all is :class:`FaultNotFired`.
"""

from __future__ import annotations

import dataclasses
import logging

from spark_ext.recovery.case import RecoveryCase, RecoveryResult, RunSlot
from spark_ext.recovery.classification import RecoveryClass, classify
from spark_ext.recovery.errors import (
    EmptyCleanOutput,
    FaultNotApplicable,
    FaultNotFired,
    JobRunFailed,
)
from spark_ext.recovery.faults import FaultCell
from spark_ext.recovery.runs import JobRuns, assert_fired

__all__ = ["ACCOUNTED", "run_disorder_cell"]

log = logging.getLogger(__name__)

#: The name of the compared "output" of a disorder cell: every output and the late rows.
ACCOUNTED = "output+late"


def run_disorder_cell(runs: JobRuns, case: RecoveryCase, cell: FaultCell) -> list[RecoveryResult]:
    """Run ``case`` on disordered input (killed at ``cell``'s point if it has one)."""
    spec = case.accounting
    if spec is None:
        raise FaultNotApplicable(case.name, str(cell.fault), "the case accounts no late rows")
    ctx = runs.context(case, f"{case.name}-{cell.fault}")
    ctx = dataclasses.replace(ctx, profile=runs.fault_profile)
    expected_rows = case.prepare_disordered(ctx)
    if not expected_rows:
        raise EmptyCleanOutput(case.name, "input", str(ctx.workdir))
    slot = RunSlot(str(cell.fault), ctx.workdir / str(cell.fault))
    log.info("%s: %s", case.name, cell.describe())
    run = runs.runner(
        case.module, case.disorder_args(ctx, slot), fault=cell.spec(), timeout_s=runs.timeout_s
    )
    seconds = {"fault": run.seconds}
    assert_fired(case.name, cell, run)
    before = len(case.accounted_rows(ctx, slot)[0])
    note = "finished on its own"
    if not run.ok:
        again = runs.runner(case.module, case.disorder_args(ctx, slot), timeout_s=runs.timeout_s)
        seconds["restarted"] = again.seconds
        if not again.ok:
            raise JobRunFailed(case.name, f"{cell.fault} restarted", again)
        note = "killed, restarted"
    rows, late = case.accounted_rows(ctx, slot)
    if late == 0:
        raise FaultNotFired(case.name, f"{cell.describe()} (no row went late)", run)
    expected = case.expected(cell.fault)
    want = next(iter(expected.values()), RecoveryClass.PRECISE)
    result = RecoveryResult(
        case.name,
        ACCOUNTED,
        want,
        cell.describe(),
        classify(expected_rows, rows, spec),
        before,
        seconds,
        fault=cell.fault,
        note=f"{note}; {late} of {len(expected_rows)} input rows late",
    )
    log.info(
        "%s %s: %s (expected %s)", result.label, cell.fault, result.observed, result.expected_label
    )
    return [result]
