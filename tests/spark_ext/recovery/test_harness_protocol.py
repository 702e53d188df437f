"""The harness's run protocol with a fake runner (no Spark): clean, faulted, restarted, judged.

A cell is classified only when it can be: the clean output is not empty, the fault asked for
is seen firing in the run's fault log, paths mean the caller's folders. Everything else is a
typed error, never a class.
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
    EmptyCleanOutput,
    ExpectedError,
    ExpectedOutput,
    FaultCell,
    FaultClass,
    FaultNotFired,
    JobRunFailed,
    OutputSpec,
    RecoveryClass,
    RecoveryHarness,
    format_table,
    observed_error,
    write_report,
)
from spark_ext.recovery.matrix import (
    CellStatus,
    format_matrix,
    run_job_cells,
    write_matrix_report,
)
from tests.spark_ext.recovery.conftest import InMemoryCase

EVENTS = OutputSpec(columns=("id", "v"))
CLEAN = [{"id": i, "v": f"v{i}"} for i in range(10)]
AFTER_COMMIT = declare("fake.3.committed", "driver", "fake: commit landed")
STAGED = declare("fake.1.staged", "executor", "fake: task staged its rows")


class FakeCase(InMemoryCase):
    """Writes ids 0..9 per run; a faulted run wrote ids 0..4, its restart ids ``restart_ids``."""

    name = "fake"
    module = "jobs.fake"
    crash = CrashPlan.at(AFTER_COMMIT, 1)
    outputs = (ExpectedOutput("events", EVENTS, RecoveryClass.GAP),)
    cells = {
        FaultClass.TASK_RAISE: FaultCell(FaultClass.TASK_RAISE, STAGED, 1, RecoveryClass.PRECISE),
        FaultClass.CHECKPOINT_RESET: FaultCell(
            FaultClass.CHECKPOINT_RESET, expected=ExpectedError("BatchRegressionError")
        ),
    }

    def __init__(self, restart_ids: range) -> None:
        super().__init__()
        self.restart_ids = restart_ids


class FakeRunner:
    """Plays the job: the fault named in ``fault=`` fires (and is logged) unless told not to."""

    def __init__(
        self,
        case: FakeCase,
        fires: bool = True,
        clean_rows: list[dict[str, Any]] = CLEAN,
        reset_output: str = "BatchRegressionError: batch 0 is below the recorded batch 2",
    ) -> None:
        self.case, self.fires, self.clean_rows = case, fires, clean_rows
        self.reset_output = reset_output
        self.calls: list[tuple[str, str | None]] = []

    def __call__(self, module, args, fault=None, kill_after_s=None, timeout_s=0.0, **kw):
        out = Path(args[-1])
        slot = out.name
        self.calls.append((slot, fault))
        rows = self.case.written.setdefault(slot, [])
        if slot == "clean":
            if rows:  # a second run of the clean slot: a checkpoint reset
                return JobRun(1, 1.0, self.reset_output)
            # A checkpoint as Spark leaves it: its metadata file, a batch in each log.
            for name in ("metadata", "offsets/0", "commits/0"):
                (out / "_chk" / name).parent.mkdir(parents=True, exist_ok=True)
                (out / "_chk" / name).write_text("{}")
            rows.extend(self.clean_rows)
            return JobRun(0, 1.0, "")
        if fault:
            point, _, kind = fault.partition(":")
            kind = kind or "kill"
            faults = ({"point": point.split("@")[0], "kind": kind, "batch": 1},) * self.fires
            if kind == "raise" and slot == "task-raise":  # the task was retried: run finishes
                rows.extend(CLEAN)
                return JobRun(0, 1.0, "", faults)
            rows.extend(CLEAN[:5])
            return JobRun(-signal.SIGKILL, 1.0, "SPARK_EXT_CRASH", faults)
        rows.extend(CLEAN[i] for i in self.case.restart_ids)
        return JobRun(0, 1.0, "")


def harness(tmp_path: Path, runner: FakeRunner) -> RecoveryHarness:
    return RecoveryHarness(tmp_path, "127.0.0.1:9092", runner=runner, parallel=False)


def test_harness_runs_clean_then_killed_then_restarted_and_classifies(tmp_path: Path):
    case = FakeCase(restart_ids=range(7, 10))
    runner = FakeRunner(case)
    [result] = harness(tmp_path, runner).check(case)
    assert runner.calls == [
        ("clean", None),
        ("crashed", "fake.3.committed@1"),
        ("crashed", None),
    ]
    assert result.recovery_class is RecoveryClass.GAP and result.as_expected
    assert result.rows_before_restart == 5
    assert [d.row["id"] for d in result.comparison.missing] == [5, 6]


def test_a_kill_that_did_not_fire_at_its_point_is_an_error_not_a_class(tmp_path: Path):
    """A SIGKILL from elsewhere (an OOM kill, a kill at another point) is not the fault."""
    case = FakeCase(restart_ids=range(5, 10))
    with pytest.raises(FaultNotFired, match=r"fake\.3\.committed@1"):
        harness(tmp_path, FakeRunner(case, fires=False)).check(case)


def test_an_empty_clean_output_is_an_error_not_precise(tmp_path: Path):
    """Two empty outputs compare equal: that false pass is refused."""
    case = FakeCase(restart_ids=range(5, 10))
    with pytest.raises(EmptyCleanOutput, match="events"):
        harness(tmp_path, FakeRunner(case, clean_rows=[])).check(case)


def test_harness_reports_a_failed_clean_run(tmp_path: Path):
    case = FakeCase(restart_ids=range(5, 10))

    def failing(module, args, **kwargs):
        return JobRun(1, 1.0, "Traceback: boom")

    with pytest.raises(JobRunFailed, match="clean run exited with 1"):
        RecoveryHarness(tmp_path, "b:1", runner=failing).check(case)


def test_a_relative_workdir_and_profile_path_are_the_callers(tmp_path: Path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "mine.toml").write_text("")
    h = RecoveryHarness(Path("var/recovery"), "b:1", profile="mine.toml")
    monkeypatch.chdir("/")
    assert h.workdir == tmp_path / "var" / "recovery"
    assert h.profile == str(tmp_path / "mine.toml")
    assert h.context(FakeCase(range(0))).workdir == tmp_path / "var" / "recovery" / "fake"


def test_task_raise_cell_runs_with_the_fault_profile_and_needs_no_restart(tmp_path: Path):
    case = FakeCase(restart_ids=range(5, 10))
    runner = FakeRunner(case)
    [result] = harness(tmp_path, runner).run_cell(case, FaultClass.TASK_RAISE)
    assert runner.calls == [("clean", None), ("task-raise", "fake.1.staged@1:raise")]
    assert result.fault is FaultClass.TASK_RAISE and result.as_expected
    assert result.note == "finished on its own"


def test_checkpoint_reset_is_as_expected_only_with_the_typed_error_and_nothing_written(
    tmp_path: Path,
):
    case = FakeCase(restart_ids=range(5, 10))
    [result] = harness(tmp_path, FakeRunner(case)).run_cell(case, FaultClass.CHECKPOINT_RESET)
    assert not (tmp_path / "fake" / "clean" / "_chk").exists()  # deleted, output kept
    assert result.error == "BatchRegressionError" and result.as_expected
    assert result.observed == "BatchRegressionError"

    other = FakeCase(restart_ids=range(5, 10))
    runner = FakeRunner(other, reset_output="ConcurrentWriterError: someone else")
    [wrong] = harness(tmp_path, runner).run_cell(other, FaultClass.CHECKPOINT_RESET)
    assert wrong.error == "ConcurrentWriterError" and not wrong.as_expected


class RefusingCase(FakeCase):
    cells = {
        FaultClass.SPECULATION: FaultCell(
            FaultClass.SPECULATION, expected=ExpectedError("SinkConfigError")
        )
    }


@pytest.mark.parametrize(
    ("rc", "written", "as_expected"),
    [(1, 0, True), (1, 3, False), (0, 0, False)],
    ids=["refused-nothing-written", "refused-after-writing", "ran-with-speculation"],
)
def test_a_job_that_refuses_speculation_must_name_its_error_on_a_fresh_slot_and_write_nothing(
    tmp_path: Path, rc: int, written: int, as_expected: bool
):
    case = RefusingCase(restart_ids=range(0))
    plain = FakeRunner(case)

    def runner(module, args, fault=None, **kw):
        slot = Path(args[-1]).name
        if slot == "clean":
            return plain(module, args, fault=fault, **kw)
        assert fault is None  # no straggler: the job is only started with speculation on
        case.written.setdefault(slot, []).extend(CLEAN[:written])
        return JobRun(rc, 1.0, "spark_ext.sinks.errors.SinkConfigError: spark.speculation")

    [result] = harness(tmp_path, runner).run_cell(case, FaultClass.SPECULATION)
    assert result.as_expected is as_expected, result
    assert result.rows_before_restart == 0  # judged against no rows, not the clean run's


def test_a_refusal_cell_needs_a_typed_error_and_a_straggler_needs_seconds():
    with pytest.raises(ValueError, match="typed error"):
        FaultCell(FaultClass.SPECULATION)
    with pytest.raises(ValueError, match="seconds"):
        FaultCell(FaultClass.SPECULATION, STAGED, 1)


def test_observed_error_names_the_last_known_typed_error_in_the_output():
    tail = "pyspark...StreamingQueryException: ... spark_ext.sinks.errors.BatchRegressionError: x"
    assert observed_error(tail, {"BatchRegressionError", "SinkError"}) == "BatchRegressionError"
    assert observed_error("ValueError: nothing of ours", {"BatchRegressionError"}) is None


def test_fault_cells_refuse_a_point_on_the_wrong_side():
    with pytest.raises(ValueError, match="executor point"):
        FaultCell(FaultClass.TASK_RAISE, AFTER_COMMIT, 1)
    with pytest.raises(ValueError, match="driver point"):
        FaultCell(FaultClass.DRIVER_RAISE, STAGED, 1)
    assert FaultCell(FaultClass.SPECULATION, STAGED, 2, seconds=4).spec() == (
        "fake.1.staged@2:sleep=4"
    )


def test_table_and_report_show_each_job_with_its_plot(tmp_path: Path):
    case = FakeCase(restart_ids=range(4, 10))
    [result] = harness(tmp_path, FakeRunner(case)).check(case)
    table = format_table([result])
    assert "rollback-repeating" in table and "gap" in table and "NO" in table
    index = write_report([result], tmp_path / "report")
    page = index.read_text()
    assert "<img src='fake-kill-events.png'" in page and "extra rows (1)" in page
    assert "Hwang et al." in page and "seed" not in page
    assert (tmp_path / "report" / "fake-kill-events.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_matrix_marks_cells_and_links_each_picture_cell_to_its_diff(tmp_path: Path):
    case = FakeCase(restart_ids=range(4, 10))
    faults = [FaultClass.KILL, FaultClass.CHECKPOINT_RESET, FaultClass.DRIVER_RAISE]
    cells = run_job_cells(harness(tmp_path, FakeRunner(case)), case, faults)
    status = {c.fault: c.status for c in cells}
    assert status == {
        FaultClass.KILL: CellStatus.UNEXPECTED,  # rollback-repeating where gap is declared
        FaultClass.CHECKPOINT_RESET: CellStatus.AS_EXPECTED,
        FaultClass.DRIVER_RAISE: CellStatus.NOT_APPLICABLE,
    }
    text = format_matrix(cells)
    assert "rollback-repeating (want gap)" in text and "BatchRegressionError" in text
    page = write_matrix_report(cells, tmp_path / "matrix").read_text()
    assert "<img src='matrix.png' usemap='#matrix'" in page
    assert page.count("<area shape='rect'") == 3 and "href='#fake-kill'" in page
    assert "<section id='fake-kill'>" in page and "<section id='fake-kill-events'>" in page


def test_a_failed_runs_error_names_its_cause_not_only_the_plan_printed_after_it():
    from spark_ext.recovery.errors import cause_lines

    tail = (
        "spark_ext.tracker.errors.CheckpointBehindAgent: query 'w': the agent applied batch 2\n"
        "pyspark.errors.exceptions.captured.StreamingQueryException: [STREAM_FAILED] boom\n"
        + "   +- ~Project [a#1 AS SomethingError: x]\n"
        * 200
    )
    run = JobRun(1, 1.0, tail)
    message = str(JobRunFailed("w", "restarted", run))
    assert "CheckpointBehindAgent: query 'w'" in message and "STREAM_FAILED" in message
    assert "SomethingError" not in cause_lines(tail)


def test_derived_profiles_add_spark_settings_and_point_at_another_broker(tmp_path: Path):
    from spark_ext.config import load_profile
    from spark_ext.recovery.profiles import derive_profile
    from spark_ext.recovery.speculation import SPECULATION_CONF

    path = derive_profile("faults", tmp_path / "p.toml", SPECULATION_CONF, "127.0.0.1:19200")
    profile = load_profile(path)
    assert (
        profile.spark.master == "local[2,2]" and profile.spark.conf["spark.speculation"] == "true"
    )
    assert profile.spark.conf["spark.sql.adaptive.enabled"] == "false"  # kept from the base
    assert profile.kafka.bootstrap_servers == "127.0.0.1:19200"


def test_a_cell_whose_harness_step_fails_is_an_error_and_the_other_cells_still_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    case = FakeCase(restart_ids=range(4, 10))
    h = harness(tmp_path, FakeRunner(case))
    run_cell = h.run_cell

    def failing(case, fault, clean=None):
        if fault is FaultClass.KILL:  # e.g. the store refused a request of the expiry
            raise OSError("501 Not Implemented")
        return run_cell(case, fault, clean)

    monkeypatch.setattr(h, "run_cell", failing)
    cells = run_job_cells(h, case, [FaultClass.KILL, FaultClass.CHECKPOINT_RESET])
    status = {c.fault: c.status for c in cells}
    assert status == {
        FaultClass.KILL: CellStatus.ERROR,
        FaultClass.CHECKPOINT_RESET: CellStatus.AS_EXPECTED,
    }
    assert "OSError: 501 Not Implemented" in format_matrix(cells)
