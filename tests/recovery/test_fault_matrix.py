"""The fault matrix in CI: each cheap cell (job x fault) gets the outcome its job declares.

CI runs the exactly-once Delta and Kafka jobs, the tracker's window job and the dedup sink's
job under ``task-raise``, ``driver-raise`` and ``checkpoint-reset`` (one clean run per job, the
jobs two at a time). Their ``kill`` cells run with ``SPARK_EXT_MATRIX_ALL=1``: in CI each of these
four jobs is killed at every step of its protocol by its own crash test
(``tests/sinks/test_delta_sink_crashes.py``, ``tests/sinks/test_kafka_sliced.py``,
``tests/tracker/test_tracker_crash.py``, ``tests/dedup/test_dedup_sink_crash.py``), which the
single kill of a cell repeats (the suite's 35-minute budget). ``SPARK_EXT_MATRIX_ALL=1`` runs every registered job under
every fault class, broker faults included (each on a broker of its own, paused past the
delivery timeout: minutes per cell), the retention faults (output topic trimmed, Delta txn
expired, Delta log trimmed) and event-time disorder; ``test_retention_and_disorder.py`` runs
the cheapest of those in CI. Speculation cells are not applicable on one machine
(:mod:`spark_ext.recovery.speculation`). A cell whose outcome differs from its declaration fails
its test with the rows that differ; a cell the harness cannot judge (fault not fired, empty
clean output, failed restart) fails with that error.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from jobs import registry
from spark_ext.recovery import FaultClass, RecoveryHarness
from spark_ext.recovery.matrix import (
    CellStatus,
    MatrixCell,
    format_matrix,
    run_matrix,
    write_matrix_report,
)

#: The matrix fixture runs every CI cell in one setup (measured: 16 min with the machine's
#: load average at 11-15, so over the suite's default 900 s per test): its own guard.
pytestmark = [pytest.mark.matrix, pytest.mark.crash, pytest.mark.timeout(2700)]

ALL = os.environ.get("SPARK_EXT_MATRIX_ALL") == "1"
CI_JOBS = ("exactly_once_delta", "exactly_once_kafka", "tracker_windows", "dedup_delta")
CI_FAULTS = (
    FaultClass.TASK_RAISE,
    FaultClass.DRIVER_RAISE,
    FaultClass.CHECKPOINT_RESET,
)
JOBS = tuple(registry.names()) if ALL else CI_JOBS
FAULTS = tuple(FaultClass) if ALL else CI_FAULTS
#: The declared cells only: a job without a point for a fault class has no cell to test.
CELLS = [
    (job, fault) for job in JOBS for fault in FAULTS if registry.get(job).cell(fault) is not None
]


@pytest.fixture(scope="session")
def matrix(
    kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory
) -> dict[tuple[str, FaultClass], MatrixCell]:
    """Every cell of :data:`CELLS`, run once for the session (jobs two at a time)."""
    workdir = tmp_path_factory.mktemp("matrix")
    harness = RecoveryHarness(workdir, kafka_bootstrap, profile="test", timeout_s=600)
    cells = run_matrix(harness, [registry.get(j) for j in JOBS], FAULTS, jobs_parallel=2)
    index = write_matrix_report(cells, Path(workdir) / "report")
    print(f"\n{format_matrix(cells)}\nfault matrix report: {index}")
    return {(c.job, c.fault): c for c in cells}


@pytest.mark.parametrize(("job", "fault"), CELLS, ids=[f"{j}-{f}" for j, f in CELLS])
def test_job_under_fault_gets_its_declared_outcome(matrix, job: str, fault: FaultClass):
    cell = matrix[(job, fault)]
    if cell.status is CellStatus.NOT_APPLICABLE:
        pytest.skip(f"{job} under {fault} cannot be injected here: {cell.error}")
    assert cell.status is not CellStatus.ERROR, cell.error
    for r in cell.results:
        c = r.comparison
        assert r.as_expected, (
            f"{r.label} under {fault}: {r.observed}, declared {r.expected_label} ({r.note})\n"
            f"missing: {[d.row for d in c.missing[:5]]}\n"
            f"extra: {[d.row for d in c.extra[:5]]}\nstate: {c.state_diffs[:5]}"
        )
