"""The ``disorder`` fault: input whose event times break the partitions' promise (killed and
restarted at the cell's point, if any); ``precise`` means every input row is accounted for once,
in an output row or a late row (docs/design.md invariant 7). No late row is ``FaultNotFired``.
"""

from __future__ import annotations

import dataclasses

from spark_ext.recovery.case import RecoveryCase, RecoveryResult
from spark_ext.recovery.classification import RecoveryClass, classify
from spark_ext.recovery.errors import EmptyCleanOutput, FaultNotApplicable, FaultNotFired
from spark_ext.recovery.faults import FaultCell
from spark_ext.recovery.runs import JobRuns, judge

__all__ = ["ACCOUNTED", "run_disorder_cell"]

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
    slot = ctx.slot(str(cell.fault))
    run = runs.fault_run(case, cell, ctx, case.disorder_args(ctx, slot))
    seconds = {"fault": run.seconds}
    before = len(case.accounted_rows(ctx, slot)[0])
    note = "finished on its own"
    if not run.ok:
        seconds["restarted"] = runs.restart(case, cell.fault, case.disorder_args(ctx, slot)).seconds
        note = "killed, restarted"
    rows, late = case.accounted_rows(ctx, slot)
    if late == 0:
        raise FaultNotFired(case.name, f"{cell.describe()} (no row went late)", run)
    want = next(iter(case.expected(cell.fault).values()), RecoveryClass.PRECISE)
    compared = {ACCOUNTED: (classify(expected_rows, rows, spec), before)}
    note += f"; {late} of {len(expected_rows)} input rows late"
    return judge(
        case, cell.fault, cell.describe(), compared, seconds, note, None, {ACCOUNTED: want}
    )
