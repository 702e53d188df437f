"""The recovery classes on synthetic outputs (no Spark), and the harness's run protocol."""

from __future__ import annotations

import math
import signal
from pathlib import Path
from typing import Any

import pytest

from spark_ext.jobrun import JobRun
from spark_ext.recovery import (
    CrashPlan,
    CrashPointNotReached,
    ExpectedOutput,
    FinalStateView,
    HarnessContext,
    JobRunFailed,
    OutputSpec,
    RecoveryCase,
    RecoveryClass,
    RecoveryHarness,
    RunSlot,
    classify,
    format_table,
    write_report,
)

EVENTS = OutputSpec(columns=("id", "v"))
CLEAN = [{"id": i, "v": f"v{i}"} for i in range(10)]

# A change log of per-key state: (key, old, new) in write order ``seq`` (differs between runs).
CHANGES = OutputSpec(
    columns=("key", "old", "new"),
    final_state=FinalStateView(key=("key",), value=("new",), order=("seq",)),
)


def test_same_rows_in_another_order_are_precise():
    result = classify(CLEAN, list(reversed(CLEAN)), EVENTS)
    assert result.recovery_class is RecoveryClass.PRECISE
    assert result.missing == () and result.extra == ()


def test_lost_rows_without_extra_ones_are_a_gap_and_name_the_lost_rows():
    result = classify(CLEAN, CLEAN[:3] + CLEAN[6:], EVENTS)
    assert result.recovery_class is RecoveryClass.GAP
    assert [d.row["id"] for d in result.missing] == [3, 4, 5]
    assert result.missing_rows == 3 and result.extra == ()


def test_identical_duplicates_are_rollback_repeating():
    result = classify(CLEAN, CLEAN + CLEAN[4:6], EVENTS)
    assert result.recovery_class is RecoveryClass.ROLLBACK_REPEATING
    assert result.duplicate_rows == 2 and result.differing_rows == 0
    assert all(d.expected_count == 1 and d.observed_count == 2 for d in result.extra)


def test_a_row_the_clean_run_wrote_twice_counts_once_more_only_when_repeated_again():
    clean = [*CLEAN, CLEAN[0]]
    assert classify(clean, clean, EVENTS).recovery_class is RecoveryClass.PRECISE
    assert classify(clean, CLEAN, EVENTS).recovery_class is RecoveryClass.GAP
    assert classify(clean, [*clean, CLEAN[0]], EVENTS).recovery_class is (
        RecoveryClass.ROLLBACK_REPEATING
    )


def test_reemitted_rows_that_differ_but_reach_the_same_final_state_are_convergent():
    clean = [
        {"key": "a", "old": None, "new": 5, "seq": 0},
        {"key": "a", "old": 5, "new": 9, "seq": 1},
        {"key": "b", "old": None, "new": 1, "seq": 1},
    ]
    # The batch with seq 1 was written, the driver died, and its replay saw the new state.
    recovered = [
        {"key": "a", "old": None, "new": 5, "seq": 0},
        {"key": "a", "old": 5, "new": 9, "seq": 1},
        {"key": "b", "old": None, "new": 1, "seq": 1},
        {"key": "a", "old": 9, "new": 9, "seq": 2},
        {"key": "b", "old": 1, "new": 1, "seq": 2},
    ]
    result = classify(clean, recovered, CHANGES)
    assert result.recovery_class is RecoveryClass.ROLLBACK_CONVERGENT
    assert result.final_state_equal
    assert {(d.row["key"], d.row["old"]) for d in result.extra} == {("a", 9), ("b", 1)}


def test_final_state_takes_the_last_row_by_order_not_by_read_order():
    clean = [
        {"key": "a", "old": None, "new": 1, "seq": 0},
        {"key": "a", "old": 1, "new": 2, "seq": 1},
    ]
    replayed = [*reversed(clean), {"key": "a", "old": 2, "new": 2, "seq": 5}]
    assert classify(clean, replayed, CHANGES).recovery_class is (RecoveryClass.ROLLBACK_CONVERGENT)


def test_a_final_state_that_differs_is_rollback_divergent_with_the_differing_keys():
    clean = [
        {"key": "a", "old": None, "new": 5, "seq": 0},
        {"key": "b", "old": None, "new": 1, "seq": 0},
    ]
    recovered = [*clean, {"key": "a", "old": 5, "new": 10, "seq": 1}]
    result = classify(clean, recovered, CHANGES)
    assert result.recovery_class is RecoveryClass.ROLLBACK_DIVERGENT
    assert [(d.key, d.expected, d.observed) for d in result.state_diffs] == [
        ({"key": "a"}, {"new": 5}, {"new": 10})
    ]


def test_a_differing_extra_row_without_a_final_state_view_is_divergent():
    result = classify(CLEAN, [*CLEAN, {"id": 3, "v": "other"}], EVENTS)
    assert result.recovery_class is RecoveryClass.ROLLBACK_DIVERGENT
    assert result.differing_rows == 1 and not result.final_state_equal


def test_lost_and_duplicated_rows_together_are_divergent_not_a_gap():
    result = classify(CLEAN, [*CLEAN[1:], CLEAN[5]], EVENTS)
    assert result.recovery_class is RecoveryClass.ROLLBACK_DIVERGENT
    assert result.missing_rows == 1 and result.duplicate_rows == 1


def test_missing_values_compare_equal_whatever_their_spelling():
    clean = [{"id": 1, "v": None}]
    assert classify(clean, [{"id": 1, "v": math.nan}], EVENTS).recovery_class is (
        RecoveryClass.PRECISE
    )


def test_run_dependent_columns_are_not_compared():
    recovered = [{**row, "batch_id": 99} for row in CLEAN]
    assert classify(CLEAN, recovered, EVENTS).recovery_class is RecoveryClass.PRECISE


def test_a_final_state_view_must_use_compared_columns():
    with pytest.raises(ValueError, match=r"not in OutputSpec\.columns"):
        OutputSpec(columns=("id",), final_state=FinalStateView(key=("id",), value=("v",)))


# ---------------------------------------------------------------------------------------------
# The harness protocol with a fake runner: clean, killed, restarted, then compared.
# ---------------------------------------------------------------------------------------------


class FakeCase(RecoveryCase):
    """Writes ids 0..9 per run; a killed run wrote ids 0..4, its restart ids ``restart_ids``."""

    name = "fake"
    module = "jobs.fake"
    crash = CrashPlan(crash_at="fake.after_commit@1")
    outputs = (ExpectedOutput("events", EVENTS, RecoveryClass.GAP),)

    def __init__(self, restart_ids: range) -> None:
        self.restart_ids = restart_ids
        self.written: dict[str, list[dict[str, Any]]] = {}

    def prepare(self, ctx: HarnessContext) -> None:
        self.prepared = ctx

    def job_args(self, ctx: HarnessContext, slot: RunSlot) -> list[str]:
        return ["--out", slot.name]

    def read_output(self, ctx: HarnessContext, slot: RunSlot, output: str) -> list[dict[str, Any]]:
        return list(self.written.get(slot.name, []))


class FakeRunner:
    def __init__(self, case: FakeCase, killed_rc: int = -signal.SIGKILL) -> None:
        self.case, self.killed_rc, self.calls = case, killed_rc, []

    def __call__(self, module, args, crash_at=None, kill_after_s=None, timeout_s=0.0):
        self.calls.append((args[-1], crash_at))
        rows = self.case.written.setdefault(args[-1], [])
        if args[-1] == "clean":
            rows.extend(CLEAN)
        elif crash_at:
            rows.extend(CLEAN[:5])
            return JobRun(self.killed_rc, 1.0, "SPARK_EXT_CRASH")
        else:
            rows.extend(CLEAN[i] for i in self.case.restart_ids)
        return JobRun(0, 1.0, "")


def test_harness_runs_clean_then_killed_then_restarted_and_classifies(tmp_path: Path):
    case = FakeCase(restart_ids=range(7, 10))
    runner = FakeRunner(case)
    [result] = RecoveryHarness(tmp_path, "127.0.0.1:9092", runner=runner, parallel=False).check(
        case
    )
    assert runner.calls == [
        ("clean", None),
        ("crashed", "fake.after_commit@1"),
        ("crashed", None),
    ]
    assert result.recovery_class is RecoveryClass.GAP and result.as_expected
    assert result.rows_before_restart == 5
    assert [d.row["id"] for d in result.comparison.missing] == [5, 6]


def test_harness_refuses_a_run_that_was_not_killed(tmp_path: Path):
    case = FakeCase(restart_ids=range(5, 10))
    with pytest.raises(CrashPointNotReached, match=r"fake\.after_commit@1"):
        RecoveryHarness(tmp_path, "b:1", runner=FakeRunner(case, killed_rc=0)).check(case)


def test_harness_reports_a_failed_clean_run(tmp_path: Path):
    case = FakeCase(restart_ids=range(5, 10))

    def failing(module, args, **kwargs):
        return JobRun(1, 1.0, "Traceback: boom")

    with pytest.raises(JobRunFailed, match="clean run exited with 1"):
        RecoveryHarness(tmp_path, "b:1", runner=failing).check(case)


def test_table_and_report_show_each_job_with_its_plot(tmp_path: Path):
    case = FakeCase(restart_ids=range(4, 10))
    [result] = RecoveryHarness(tmp_path, "b:1", runner=FakeRunner(case)).check(case)
    table = format_table([result])
    assert "rollback-repeating" in table and "gap" in table and "NO" in table
    index = write_report([result], tmp_path / "report")
    page = index.read_text()
    assert "<img src='fake-events.png'" in page and "extra rows (1)" in page
    assert (tmp_path / "report" / "fake-events.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
