"""The retention, disorder and random-kill cells' protocol with a fake runner (no Spark).

A retention cell is judged on what retention left: a restart that guesses (writes the trimmed
batch again) is not precise, a typed error must leave nothing written after the trim. A
disorder cell in which no row went late proves nothing, and a lost row is a gap. A kill at a
random moment is reported with the step it landed after.
"""

from __future__ import annotations

import signal
from pathlib import Path
from typing import Any

import pytest

from spark_ext.crash import declare
from spark_ext.jobrun import JobRun
from spark_ext.recovery import (
    CrashPlan,
    ExpectedError,
    ExpectedOutput,
    FaultCell,
    FaultClass,
    FaultNotFired,
    HarnessContext,
    OutputSpec,
    RecoveryClass,
    RecoveryHarness,
    RunSlot,
)
from tests.spark_ext.recovery.conftest import InMemoryCase

EVENTS = OutputSpec(columns=("id",))
ROWS = [{"id": i} for i in range(10)]
WRITTEN = declare("trimfake.3.written", "driver", "trim fake: records written, not recorded")


class TrimCase(InMemoryCase):
    """Writes ids 0..9; a killed run wrote 0..4; retention removes what is there; the
    restart writes ``restart_ids`` or stops with ``restart_error``."""

    name = "trimfake"
    module = "jobs.trimfake"
    crash = CrashPlan.at(WRITTEN, 1)
    outputs = (ExpectedOutput("events", EVENTS, RecoveryClass.PRECISE),)
    accounting = EVENTS

    def __init__(
        self,
        expected: RecoveryClass | ExpectedError,
        restart_ids: range = range(5, 10),
        restart_error: str = "",
        accounted: list[dict[str, Any]] | None = None,
        late: int = 2,
    ) -> None:
        super().__init__()
        self.cells = {
            FaultClass.OUTPUT_TRIM: FaultCell(FaultClass.OUTPUT_TRIM, WRITTEN, 1, expected),
            FaultClass.DISORDER: FaultCell(FaultClass.DISORDER, expected=expected),
        }
        self.restart_ids, self.restart_error = restart_ids, restart_error
        self.accounted = ROWS if accounted is None else accounted
        self.late = late
        self.expired: list[str] = []

    def expire_output(self, ctx: HarnessContext, slot: RunSlot, fault: FaultClass) -> None:
        self.expired.append(slot.name)
        self.written[slot.name] = []

    def prepare_disordered(self, ctx: HarnessContext) -> list[dict[str, Any]]:
        return list(ROWS)

    def accounted_rows(
        self, ctx: HarnessContext, slot: RunSlot
    ) -> tuple[list[dict[str, Any]], int]:
        return list(self.accounted), self.late


class TrimRunner:
    def __init__(self, case: TrimCase, last_step: str = "trimfake.3.written") -> None:
        self.case, self.last_step = case, last_step

    def __call__(self, module, args, fault=None, kill_after_s=None, timeout_s=0.0, **kw):
        slot = Path(args[-1]).name
        rows = self.case.written.setdefault(slot, [])
        if slot in ("clean", "disorder"):
            rows.extend(ROWS)
            return JobRun(0, 1.0, "")
        if fault or kill_after_s is not None:
            rows.extend(ROWS[:5])
            faults = ({"point": WRITTEN.name, "kind": "kill", "batch": 1},) if fault else ()
            steps = ({"point": self.last_step, "kind": "reached", "batch": 1},)
            return JobRun(-signal.SIGKILL, 1.0, "", faults, steps)
        if self.case.restart_error:
            return JobRun(1, 1.0, f"{self.case.restart_error}: nothing written")
        rows.extend(ROWS[i] for i in self.case.restart_ids)
        return JobRun(0, 1.0, "")


def run(tmp_path: Path, case: TrimCase, fault: FaultClass):
    harness = RecoveryHarness(tmp_path, "127.0.0.1:9092", runner=TrimRunner(case), parallel=False)
    return harness.run_cell(case, fault)


def test_a_restart_that_writes_only_what_is_missing_is_precise_on_what_retention_left(tmp_path):
    case = TrimCase(RecoveryClass.PRECISE)
    [result] = run(tmp_path, case, FaultClass.OUTPUT_TRIM)
    assert case.expired == ["output-trim"]
    assert result.recovery_class is RecoveryClass.PRECISE and result.as_expected
    # Seen by consumers: the 5 rows trimmed, then the 5 the restart wrote.
    assert result.comparison.observed_rows == 10 and result.rows_before_restart == 0


def test_a_restart_that_guesses_after_the_trim_is_not_precise(tmp_path):
    """Written again what retention trimmed: duplicates of what the trim removed."""
    [result] = run(tmp_path, TrimCase(RecoveryClass.PRECISE, range(0, 10)), FaultClass.OUTPUT_TRIM)
    assert result.recovery_class is RecoveryClass.ROLLBACK_REPEATING and not result.as_expected


def test_a_typed_error_after_the_trim_is_as_expected_only_with_nothing_written(tmp_path):
    unprovable = ExpectedError("ReplayUnprovableError")
    [ok] = run(
        tmp_path,
        TrimCase(unprovable, restart_error="ReplayUnprovableError"),
        FaultClass.OUTPUT_TRIM,
    )
    assert ok.error == "ReplayUnprovableError" and ok.as_expected
    # The same cell where the restart guessed and finished: not the declared error.
    [guessed] = run(tmp_path / "b", TrimCase(unprovable), FaultClass.OUTPUT_TRIM)
    assert guessed.error is None and not guessed.as_expected


def test_a_disorder_run_without_a_late_row_proves_nothing(tmp_path):
    with pytest.raises(FaultNotFired, match="no row went late"):
        run(tmp_path, TrimCase(RecoveryClass.PRECISE, late=0), FaultClass.DISORDER)


def test_a_disorder_run_that_lost_a_row_is_a_gap(tmp_path):
    case = TrimCase(RecoveryClass.PRECISE, accounted=ROWS[1:])
    [result] = run(tmp_path, case, FaultClass.DISORDER)
    assert result.recovery_class is RecoveryClass.GAP and not result.as_expected


def test_a_kill_at_a_random_moment_is_reported_with_the_step_it_landed_after(tmp_path):
    case = TrimCase(RecoveryClass.PRECISE)
    case.crash = CrashPlan(kill_after_s=3.0)
    harness = RecoveryHarness(tmp_path, "127.0.0.1:9092", runner=TrimRunner(case), parallel=False)
    [result] = harness.check(case)
    assert result.crash == "SIGKILL after 3s (after trimfake.3.written@1)"


def test_the_matrix_runs_retention_cells_on_the_clean_run_and_disorder_on_its_own(tmp_path):
    from spark_ext.recovery.matrix import CellStatus, run_job_cells

    case = TrimCase(RecoveryClass.PRECISE)
    harness = RecoveryHarness(tmp_path, "127.0.0.1:9092", runner=TrimRunner(case), parallel=False)
    faults = [FaultClass.DISORDER, FaultClass.OUTPUT_TRIM, FaultClass.TXN_RETENTION]
    cells = {c.fault: c for c in run_job_cells(harness, case, faults)}
    assert cells[FaultClass.OUTPUT_TRIM].status is CellStatus.AS_EXPECTED
    assert cells[FaultClass.DISORDER].status is CellStatus.AS_EXPECTED
    assert cells[FaultClass.TXN_RETENTION].status is CellStatus.NOT_APPLICABLE
    assert sorted(case.written) == ["clean", "disorder", "output-trim"]
