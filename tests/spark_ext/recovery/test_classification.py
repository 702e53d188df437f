"""The recovery classes on synthetic outputs: pure logic, no Spark, no harness."""

from __future__ import annotations

import math

import pytest

from spark_ext.recovery.classification import FinalStateView, OutputSpec, RecoveryClass, classify

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
