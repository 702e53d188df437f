"""Operators in the in-memory tester (the code Spark runs per group), no Spark."""

from __future__ import annotations

import numpy as np

from spark_ext.operators import (
    Count,
    EwmaOperator,
    Mean,
    SessionWindow,
    Sum,
    UserFunction,
    WindowAggregate,
    WindowJoin,
    ewma,
)
from spark_ext.streaming.tester import OperatorTester
from spark_ext.tracker import Sliding, Tumbling, label_of, xor_fold


def rows(*items):
    return [{"key": k, "event_time_ms": t, "x": float(x)} for k, t, x in items]


def test_tumbling_window_emits_once_on_end_and_drops_its_state():
    t = OperatorTester(
        WindowAggregate(Count(), Sum("x"), Mean("x"), UserFunction("last", "x", lambda v: v[-1])),
        Tumbling("10 seconds", namespace="w"),
    )
    assert t.add(rows(("a", 5_000, 1), ("b", 1_000, 2), ("a", 2_000, 3), ("a", 12_000, 9))).empty
    out = t.end("w/0/10000").sort_values("key")
    assert out[["key", "count", "sum_x", "mean_x", "last"]].values.tolist() == [
        ["a", 2, 4.0, 2.0, 1.0],  # 'last' in event-time order, not arrival order
        ["b", 1, 2.0, 2.0, 2.0],
    ]
    assert t.end("w/0/10000").empty  # a second end of the same window emits nothing
    assert t.state_groups() == 1  # only window [10 s, 20 s) of key a is left


def test_sliding_window_counts_an_element_in_every_window_it_falls_in():
    t = OperatorTester(WindowAggregate(Count()), Sliding("10 seconds", "5 seconds", namespace="s"))
    t.add(rows(("a", 7_000, 0)))
    assert t.end("s/0/10000")["count"].tolist() == [1]
    assert t.end("s/5000/15000")["count"].tolist() == [1]


def test_operator_reports_cancel_the_labels_it_finished():
    t = OperatorTester(WindowAggregate(Count()), Tumbling("10 seconds", namespace="w"))
    t.add([{"key": f"k{i}", "event_time_ms": i * 100} for i in range(20)])
    got = 0
    for r in t.reports:
        got ^= r.xors.get("w/0/10000", 0)
    assert got == xor_fold(label_of("tester", 0, i) for i in range(20))  # offsets 0..19
    assert sum(r.counts.get("w/0/10000", 0) for r in t.reports) == -20


def test_session_window_closes_a_session_only_when_the_tracker_passed_its_gap():
    t = OperatorTester(SessionWindow("5 seconds", Count()), Tumbling("5 seconds", namespace="b"))
    t.add(rows(("a", 1_000, 0), ("a", 3_000, 0), ("a", 20_000, 0), ("b", 4_000, 0)))
    assert t.end("b/0/5000").empty  # a's session [1 s, 8 s) could still grow
    out = t.end("b/5000/10000").sort_values("key")
    assert out[["key", "session_start_ms", "session_end_ms", "count"]].values.tolist() == [
        ["a", 1_000, 8_000, 2],
        ["b", 4_000, 9_000, 1],
    ]
    assert t.end("b/15000/20000").empty  # a's session at 20 s could still grow
    assert t.end("b/20000/25000")["count"].tolist() == [1]  # nothing before 25 s is to come
    assert t.state_groups() == 0


def test_join_emits_each_pair_once_and_prunes_state_on_window_end():
    t = OperatorTester(
        WindowJoin(("x",), ("x",), how="left"), Tumbling("10 seconds", namespace="j")
    )
    left = [{"key": "a", "event_time_ms": 1_000, "x": 1.0, "side": "left"}]
    left += [{"key": "z", "event_time_ms": 2_000, "x": 7.0, "side": "left"}]
    right = [{"key": "a", "event_time_ms": 3_000, "x": 2.0, "side": "right"}]
    right += [{"key": "a", "event_time_ms": 4_000, "x": 3.0, "side": "right"}]
    first = t.add(left)
    second = t.add(right)
    assert first.empty
    assert sorted(second["right_x"].tolist()) == [2.0, 3.0]
    assert set(second["left_x"]) == {1.0}
    unmatched = t.end("j/0/10000")
    assert unmatched[["key", "left_x"]].values.tolist() == [["z", 7.0]]
    assert unmatched["right_x"].isna().all()
    assert t.state_groups() == 0


def test_ewma_folds_in_event_time_order_whatever_the_arrival_order():
    op_rows = [("a", 3_000, 4.0), ("a", 1_000, 1.0), ("a", 2_000, 1.0)]
    expected = ewma([1.0, 1.0, 4.0], alpha=0.5).tolist()
    for order in ([0, 1, 2], [2, 1, 0], [1, 0, 2]):
        t = OperatorTester(EwmaOperator("x", alpha=0.5), Tumbling("10 seconds", namespace="e"))
        for i in order:
            t.add(rows(op_rows[i]))
        out = t.end("e/0/10000")
        assert out["ewma"].tolist() == expected
    # the running value carries into the next bucket
    t.add(rows(("a", 12_000, 3.0)))
    assert np.isclose(t.end("e/10000/20000")["ewma"].iloc[0], 0.5 * 3.0 + 0.5 * expected[-1])
