"""StateReport arithmetic and the benchmark's percentile, without Spark."""

from __future__ import annotations

import math

from scripts.benchmarks.state_store import percentile, read_events
from spark_ext.state_inspect import PartitionState, StateOperator, StateReport


def report() -> StateReport:
    ops = (
        StateOperator(0, "stateStoreSave", "default", 2, 0, 7),
        StateOperator(1, "dedupe", "default", 1, 3, 7),
    )
    parts = (
        PartitionState(0, "default", 0, rows=10, bytes_on_disk=100),
        PartitionState(0, "default", 1, rows=5, bytes_on_disk=50),
        PartitionState(1, "default", 0, rows=2, bytes_on_disk=7),
    )
    return StateReport("/chk", 7, ops, parts)


def test_report_totals_rows_and_bytes_per_operator_and_overall() -> None:
    r = report()
    assert (r.rows(), r.bytes_on_disk()) == (17, 157)
    assert (r.rows(0), r.bytes_on_disk(0)) == (15, 150)
    assert (r.rows(1), r.bytes_on_disk(1)) == (2, 7)


def test_report_table_has_a_line_per_partition_and_a_total_per_operator() -> None:
    lines = report().table().splitlines()
    assert lines[0] == "checkpoint /chk  batch 7"
    totals = [line.split() for line in lines if line.strip().startswith("total")]
    assert totals == [["total", "15", "150"], ["total", "2", "7"]]


def test_state_variables_come_from_transform_with_state_properties() -> None:
    props = {"stateVariables": [{"stateName": "count"}, {"stateName": "seen"}]}
    op = StateOperator(0, "transformWithStateInPandasExec", "default", 2, 0, 1, props)
    assert op.state_variables == ("count", "seen")
    assert StateOperator(0, "stateStoreSave", "default", 2, 0, 1).state_variables == ()


def test_percentile_interpolates_between_ranks() -> None:
    assert percentile([1, 2, 3, 4, 5], 0.5) == 3
    assert percentile([10, 20], 0.95) == 19.5
    assert math.isnan(percentile([], 0.5))


def test_read_events_skips_the_line_cut_by_a_kill(tmp_path) -> None:
    path = tmp_path / "events.jsonl"
    path.write_text('{"event": "batch", "batch": 1}\n{"event": "ba')
    assert read_events(path) == [{"event": "batch", "batch": 1}]
