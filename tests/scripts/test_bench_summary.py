"""The benchmark runner's summary of repeated runs: medians with their range, ratios of medians."""

from __future__ import annotations

import sys

from spark_ext.jobrun import REPO

sys.path.insert(0, str(REPO / "scripts"))

from benchmarks.common import Figure, LoadMonitor, format_table, summarize


def run(base: float, ours: float) -> list[Figure]:
    return [
        Figure("dedup", "dropDuplicates", "rows/s", base, "rows/s", baseline=True),
        Figure("dedup", "DeltaDedupSink", "rows/s", ours, "rows/s"),
    ]


def test_each_variant_is_the_median_of_its_runs_with_min_and_max():
    summaries = summarize([run(100, 260), run(80, 300), run(120, 240)])
    base, ours = summaries
    assert (base.value, base.low, base.high, base.runs) == (100, 80, 120, 3)
    assert (ours.value, ours.low, ours.high) == (260, 240, 300)
    table = format_table(summaries)
    assert "2.60" in table, "ratio of the medians, not of one run"
    assert "240.0-300.0" in table


def test_load_monitor_says_whether_the_machine_was_idle():
    with LoadMonitor(interval_s=0.01) as load:
        pass
    verdict = load.verdict()
    assert ("NOT idle" in verdict) != load.idle
    assert f"{load.cpus} CPUs" in verdict


def test_figures_that_differ_only_by_note_are_summarized_apart():
    def run(before: float, after: float) -> list[Figure]:
        return [
            Figure("dedup", "sink", "expected FP rate", before, "%", note="before last"),
            Figure("dedup", "sink", "expected FP rate", after, "%", note="after last"),
        ]

    before, after = summarize([run(0.6, 1.0), run(0.6, 1.0)])
    assert (before.value, before.runs, before.note) == (0.6, 2, "before last")
    assert (after.value, after.runs, after.note) == (1.0, 2, "after last")
