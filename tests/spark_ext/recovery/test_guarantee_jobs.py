"""The negative controls, killed with SIGKILL mid-run and restarted, get their declared class.

One harness check per job: a clean run (``O_e``, in this process), a run killed at the job's
fault point and its restart from the checkpoint (``O_f + O'``), compared output by output.
At-most-once must show its gap and at-least-once its repeats and its divergent aggregate: a
harness that reported ``precise`` here would be blind. The guarantee jobs under every fault
class are in ``test_fault_matrix.py`` (the cheap cells in CI, all with ``--heavy``).

Both are heavy (``--heavy``, the suite's 35-minute budget): in CI
``jobs/notebooks/01_at_most_once.py`` and ``02_at_least_once.py`` (run by
``tests/jobs/test_notebooks.py``) rebuild the same crashes of the same jobs in process and
assert the same classes (the gap; the copies and the state diffs of the repeats).
"""

from __future__ import annotations

import pytest

from jobs import registry
from spark_ext.recovery import RecoveryClass, RecoveryResult, format_table, write_report

pytestmark = [pytest.mark.integration, pytest.mark.crash]


def check(harness, name: str, results: list[RecoveryResult]) -> dict[str, RecoveryResult]:
    got = harness.check(registry.get(name))
    results.extend(got)
    table = format_table(got)
    for r in got:
        c = r.comparison
        assert r.as_expected, (
            f"{table}\nmissing: {[d.row for d in c.missing[:5]]}\n"
            f"extra: {[d.row for d in c.extra[:5]]}\nstate: {c.state_diffs[:5]}"
        )
    return {r.output: r for r in got}


@pytest.mark.heavy  # in CI notebook 01 asserts the same gap
def test_at_most_once_job_loses_the_batch_whose_offsets_were_committed(harness, recovery_results):
    events = check(harness, "at_most_once", recovery_results)["events"]
    assert events.recovery_class is RecoveryClass.GAP
    # The lost rows are exactly one batch's worth: nothing before or after it went missing.
    assert 0 < events.comparison.missing_rows < events.comparison.expected_rows
    assert events.comparison.observed_rows + events.comparison.missing_rows == (
        events.comparison.expected_rows
    )


@pytest.mark.heavy  # in CI notebook 02 asserts the same classes, copies and state diffs
def test_at_least_once_job_repeats_copies_and_diverges_an_order_sensitive_aggregate(
    harness, recovery_results, tmp_path
):
    results = check(harness, "at_least_once", recovery_results)
    events, ewma = results["events"], results["ewma"]
    assert events.recovery_class is RecoveryClass.ROLLBACK_REPEATING
    assert events.comparison.duplicate_rows > 0 and events.comparison.differing_rows == 0
    assert ewma.recovery_class is RecoveryClass.ROLLBACK_DIVERGENT
    # Users of the replayed batch were folded twice: their event counts went up.
    assert ewma.comparison.state_diffs
    assert all(
        d.observed["events"] > d.expected["events"]
        for d in ewma.comparison.state_diffs
        if d.expected and d.observed
    )

    # The report opens and shows one plot per output.
    index = write_report(list(results.values()), tmp_path / "report")
    page = index.read_text()
    for r in results.values():
        png = index.parent / f"{r.job}-{r.fault}-{r.output}.png"
        assert f"<img src='{png.name}'" in page
        assert png.read_bytes()[:4] == b"\x89PNG"
