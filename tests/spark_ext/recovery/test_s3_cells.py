"""The fault matrix's kill and driver-raise cells of the Delta jobs with every table, checkpoint,
dedup catalog and bucket state on the local S3 store (``--storage s3``; docs/design.md, "Object
storage", jobs): each gets the outcome its job declares, read back through the store.

CI runs the two Delta sink jobs (:data:`CI_JOBS`, the cells of :data:`CI_CELLS`); the other
jobs writing Delta, and every cell of each, are heavy (``--heavy``): the whole matrix on S3 is ``spark-ext matrix --storage s3``.
"""

from __future__ import annotations

import uuid

import pyarrow as pa
import pytest
from deltalake import write_deltalake

from jobs import registry
from spark_ext import storage
from spark_ext.recovery import FaultClass, RecoveryHarness, read_delta_rows
from spark_ext.recovery.matrix import CellStatus, format_matrix, run_job_cells
from spark_ext.recovery.retention import trim_delta_log
from tests.connectors.s3.conftest import s3_settings, s3_store  # noqa: F401 (fixtures)
from tests.spark_ext.recovery.conftest import store_harness

pytestmark = [pytest.mark.integration, pytest.mark.crash]

#: In CI: the jobs of the two Delta sinks.
CI_JOBS = ("exactly_once_delta", "dedup_delta")
#: The other registered jobs writing a Delta table (heavy).
HEAVY_JOBS = (
    "exactly_once_delta_idempotent",
    "at_most_once",
    "at_least_once",
    "upsert_totals",
    "ordering_dedup",
    "tracker_windows",
    "tracker_two_queries",
)
CELLS = (FaultClass.KILL, FaultClass.DRIVER_RAISE)
#: CI's cells per job (the suite's 35-minute budget): the kill only. The two-phase sink's abort
#: on the store is shown by tests/connectors/s3/test_s3_delta_sinks.py, the dedup sink's bucket
#: state there by tests/connectors/s3/test_s3_dedup_state.py, and its driver raise by the
#: campaign's CI lane (local storage); ``--heavy`` runs both cells of every job.
CI_CELLS = {"exactly_once_delta": (FaultClass.KILL,), "dedup_delta": (FaultClass.KILL,)}


@pytest.fixture(scope="module")
def s3_harness(
    request: pytest.FixtureRequest, kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory
) -> RecoveryHarness:
    """A harness whose runs write under a prefix of their own in the store's bucket."""
    return store_harness(request, tmp_path_factory.mktemp("s3-recovery"), kafka_bootstrap)


@pytest.mark.parametrize(
    "job", [*CI_JOBS, *(pytest.param(j, marks=pytest.mark.heavy) for j in HEAVY_JOBS)]
)
def test_delta_job_with_its_outputs_on_s3_recovers_from_a_kill_and_a_driver_raise_as_declared(
    s3_harness: RecoveryHarness, job: str, request: pytest.FixtureRequest
) -> None:
    heavy = request.config.getoption("heavy")
    wanted = CELLS if heavy else CI_CELLS.get(job, CELLS)
    cells = run_job_cells(s3_harness, registry.get(job), wanted)
    assert [c.status for c in cells] == [CellStatus.AS_EXPECTED] * len(wanted), format_matrix(cells)
    clean = storage.list_prefix(f"{s3_harness.out_root}/{job}/clean", s3_harness.storage)
    assert any(name.startswith(("_chk/offsets/", "_checkpoint/offsets/")) for name in clean)


@pytest.mark.heavy
@pytest.mark.parametrize("job", [*CI_JOBS, "exactly_once_delta_idempotent"])
def test_delta_job_on_s3_gets_its_declared_outcome_while_the_store_answers_errors(
    s3_harness: RecoveryHarness, job: str
) -> None:
    """The ``store-errors`` cell: every second request of the job's store answered 503/500
    for some seconds (a fault proxy in front of it), within the cell's liveness bound."""
    [cell] = run_job_cells(s3_harness, registry.get(job), (FaultClass.STORE_ERRORS,))
    assert cell.status is CellStatus.AS_EXPECTED, format_matrix([cell])
    [result] = cell.results
    print(f"{job} under store-errors: {result.note}; {result.crash}; {dict(result.run_seconds)}")
    assert result.run_seconds["liveness"] <= registry.get(job).cell(FaultClass.STORE_ERRORS).bound_s


def test_log_retention_on_s3_deletes_the_commits_before_the_checkpoint_and_keeps_the_rows(
    s3_store,  # noqa: F811
    s3_settings,  # noqa: F811
) -> None:
    """The ``log-retention`` cell's expiry on the store (its bulk delete is refused there)."""
    root = f"s3a://{s3_store.bucket}/tests/trim-{uuid.uuid4().hex[:12]}"
    uri, options = storage.delta_storage(f"{root}/t", s3_settings)
    try:
        for i in range(3):
            write_deltalake(uri, pa.table({"id": [i]}), mode="append", storage_options=options)
        assert trim_delta_log(f"{root}/t", s3_settings) == 3
        log = storage.list_prefix(f"{root}/t/_delta_log", s3_settings)
        assert [n for n in log if n.endswith(".json")] == [f"{3:020d}.json"]
        rows = read_delta_rows(f"{root}/t", ["id"], s3_settings)
        assert sorted(r["id"] for r in rows) == [0, 1, 2]
    finally:
        storage.delete(root, s3_settings)
