"""The ``slow-link`` cells on the isolated cluster (heavy): the exactly-once Kafka -> Kafka job
and the two-phase Delta sink's job (its table and checkpoint on the cluster's S3 store) give
local mode's output when the link of the host running a task of batch 1 is slowed and lossy
to the end of the run, and the run ends within the job's bound (docs/design.md, "Isolated
hosts"). The shaping alone, in CI: test_slow_link.py."""

from __future__ import annotations

import uuid

import pytest

from jobs import registry
from spark_ext import storage
from spark_ext.recovery import FaultClass, RecoveryHarness
from spark_ext.recovery.matrix import CellStatus, format_matrix, run_plan
from spark_ext.recovery.profiles import derive_profile

pytestmark = [pytest.mark.integration, pytest.mark.heavy]


def harness(isolated, tmp_path, on_store: bool) -> RecoveryHarness:
    """Clean runs in local mode against the cluster's broker (and, ``on_store``, with every
    output on the cluster's store, the profile naming it as the cluster's profile does)."""
    local = derive_profile("faults", tmp_path / "local.toml", bootstrap=isolated.bootstrap)
    kwargs = {}
    if on_store:
        cluster = (isolated.folder / "isolated.toml").read_text()
        local.write_text(local.read_text() + cluster[cluster.index("\n[storage]\n") :])
        root = f"s3a://{isolated.store.bucket}/tests/slow-link-{uuid.uuid4().hex[:12]}"
        kwargs = {"out_root": root, "storage": isolated.store.settings()}
    return RecoveryHarness(
        tmp_path / "matrix",
        isolated.bootstrap,
        profile=str(local),
        timeout_s=600,
        hosts=isolated,
        **kwargs,
    )


@pytest.mark.timeout(1800)
@pytest.mark.parametrize("job", ["exactly_once_kafka", "exactly_once_delta"])
def test_slow_link_leaves_the_two_phase_sinks_precise_and_live(isolated, tmp_path, job):
    case = registry.get(job)
    runs = harness(isolated, tmp_path, on_store=job == "exactly_once_delta")
    try:
        cells = run_plan(runs, [(case, (FaultClass.SLOW_LINK,))])
    finally:
        if runs.out_root:
            storage.delete(runs.out_root, runs.storage)
    print(format_matrix(cells))
    (cell,) = cells
    assert cell.status is CellStatus.AS_EXPECTED, cell.error or cell.observed
    (result,) = cell.results
    liveness = result.run_seconds["liveness"]
    assert liveness <= case.cell(FaultClass.SLOW_LINK).bound_s  # type: ignore[union-attr]
    print(f"{job}: {result.crash}: the run ended {liveness:.1f}s after the link slowed")
