"""The fault matrix in CI: each cheap cell (job x fault) gets the outcome its job declares.

CI runs one cell here, the idempotent Kafka sink's refusal of speculation (:data:`CI_CELLS`):
the campaign's CI lane (``test_campaign.py``, :data:`CI_RUNS` there) injects the task raise,
driver raise and ``checkpoint-reset`` cells these jobs declare, and the protocol tests inject
the kills (the suite's 35-minute budget). The other cells are heavy (``--heavy``, or only
them: ``-m "heavy and matrix"``): every registered job under every fault class, broker faults
included (each on a broker of its own, paused past the delivery timeout: minutes per cell), the retention faults (output topic
trimmed, Delta txn expired, Delta log trimmed) and event-time disorder;
``test_retention_and_disorder.py`` runs the cheapest of those in CI. The speculation
cells with a straggler need executors on two hosts (:mod:`spark_ext.recovery.speculation`):
``tests/scripts/test_standalone_cluster.py`` runs them on a standalone cluster whose workers sit
on two loopback addresses. A cell whose outcome differs from its declaration fails its test
with the rows that differ; a cell the harness cannot judge (fault not fired, empty clean
output, failed restart) fails with that error. Every cell runs a second time with its tables and
checkpoints on the local S3 store (``-s3`` ids, heavy: ``spark-ext matrix --storage s3``;
``store-errors`` runs there only);
``test_s3_cells.py`` runs the Delta sink jobs' kill and driver-raise cells there in CI.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from connectors.kafka.local_broker import private_broker
from jobs import registry
from spark_ext.recovery import FaultClass, RecoveryHarness
from spark_ext.recovery.faults import HOST_FAULTS
from spark_ext.recovery.matrix import (
    CellStatus,
    MatrixCell,
    format_matrix,
    run_plan,
    write_matrix_report,
)
from tests.spark_ext.recovery.conftest import store_harness

#: The matrix fixture runs every selected cell in one setup (measured: 16 min with the machine's
#: load average at 11-15, so over the suite's default 900 s per test): its own guard.
pytestmark = [pytest.mark.matrix, pytest.mark.crash, pytest.mark.timeout(2700)]

#: The CI subset: the cells that no other CI test injects into their job. Covered elsewhere:
#: ``task-raise``, ``driver-raise`` and ``checkpoint-reset`` by the campaign's CI lane (one seed
#: per job, chosen for them: tests/spark_ext/recovery/test_campaign.py); ``kill`` at every
#: protocol step (tests/connectors/delta/test_delta_sink_crashes.py,
#: tests/connectors/kafka/test_kafka_sliced.py, tests/spark_ext/tracker/test_tracker_crash.py,
#: tests/connectors/delta/test_dedup_sink_crash.py).
CI_CELLS: dict[str, tuple[FaultClass, ...]] = {
    # Refused at start, under any master (the straggler cells: tests/scripts/test_standalone_cluster.py).
    "exactly_once_kafka_idempotent": (FaultClass.SPECULATION,),
}


def _runs_here(job: str, fault: FaultClass) -> bool:
    """A declared cell this machine can inject: a straggler's speculative copy needs executors
    on two hosts (tests/scripts/test_standalone_cluster.py runs those cells), a local master never starts one."""
    cell = registry.get(job).cell(fault)
    if cell is None or fault in HOST_FAULTS:  # host faults: tests/cluster/test_isolated_hosts.py
        return False  # the job declares no point for the fault class: no cell to test
    return not (fault is FaultClass.SPECULATION and cell.point is not None)


CI = [(job, fault) for job, faults in CI_CELLS.items() for fault in faults]
#: Every cell this machine can inject, the CI ones first; the others are heavy.
ALL = dict.fromkeys([*CI, *((j, f) for j in registry.names() for f in FaultClass)])
CELLS = [
    pytest.param(
        job,
        fault,
        where,
        id=f"{job}-{fault}" + "-s3" * (where == "s3"),
        marks=() if (job, fault, where) in [(*c, "local") for c in CI] else pytest.mark.heavy,
    )
    for where in ("local", "s3")
    for job, fault in ALL
    if _runs_here(job, fault) and (where, fault) != ("local", FaultClass.STORE_ERRORS)
]


def _harness(
    request: pytest.FixtureRequest, where: str, workdir: Path, bootstrap: str
) -> RecoveryHarness:
    """The matrix's harness: its runs' outputs under ``workdir``, or on the local S3 store."""
    if where == "s3":
        return store_harness(request, workdir, bootstrap, timeout_s=600, brokers=private_broker)
    return RecoveryHarness(
        workdir, bootstrap, profile="test", timeout_s=600, brokers=private_broker
    )


@pytest.fixture(scope="module")
def matrix(
    request: pytest.FixtureRequest, kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory
) -> dict[tuple[str, FaultClass, str], MatrixCell]:
    """Every selected cell of :data:`CELLS`, run once (jobs two at a time), by storage."""
    plan: dict[str, dict[str, list[FaultClass]]] = {}
    for item in request.session.items:
        if item.module is request.module:
            params = item.callspec.params
            jobs = plan.setdefault(params["where"], {})
            jobs.setdefault(params["job"], []).append(params["fault"])
    found = {}
    for where, faults in plan.items():
        workdir = tmp_path_factory.mktemp(f"matrix-{where}")
        harness = _harness(request, where, workdir, kafka_bootstrap)
        cases = [(registry.get(j), f) for j, f in faults.items()]
        cells = run_plan(harness, cases, jobs_parallel=2)
        index = write_matrix_report(cells, Path(workdir) / "report")
        print(f"\n{where}:\n{format_matrix(cells)}\nfault matrix report: {index}")
        found.update({(c.job, c.fault, where): c for c in cells})
    return found


@pytest.mark.parametrize(("job", "fault", "where"), CELLS)
def test_job_under_fault_gets_its_declared_outcome(matrix, job: str, fault: FaultClass, where: str):
    cell = matrix[(job, fault, where)]
    # A planned cell that turned n/a proves nothing: a failure, never a skip.
    assert cell.status is not CellStatus.NOT_APPLICABLE, f"n/a: {cell.error}"
    assert cell.status is not CellStatus.ERROR, cell.error
    for r in cell.results:
        c = r.comparison
        assert r.as_expected, (
            f"{r.label} under {fault}: {r.observed}, declared {r.expected} ({r.note})\n"
            f"missing: {[d.row for d in c.missing[:5]]}\n"
            f"extra: {[d.row for d in c.extra[:5]]}\nstate: {c.state_diffs[:5]}"
        )
