"""``driver-partition`` on the isolated cluster: the faulted run's driver runs on a host of its
own (``sxh-d``), cut from the broker and the store once it reached the point between its sink's
two phases, and healed 10 s later; the Kafka two-phase and the Delta two-phase (on the cluster's
store) jobs give local mode's output and commit a batch within their bound after the heal
(docs/design.md, "Isolated hosts"). Heavy: a clean run, a faulted run and maybe a restart each."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest

from jobs import registry
from spark_ext.recovery import FaultClass, RecoveryHarness, network
from spark_ext.recovery.matrix import CellStatus, format_matrix, run_plan
from spark_ext.recovery.profiles import derive_profile

pytestmark = [pytest.mark.integration, pytest.mark.heavy]


def assert_precise_and_live(isolated, local: Path, job: str, **kwargs: Any) -> None:
    """``job``'s ``driver-partition`` cell, clean in local mode (``local``: its profile), faulted
    and restarted on ``isolated`` (a :class:`RecoveryHarness` with ``kwargs``), as declared."""
    work = local.parent / "matrix"
    harness = RecoveryHarness(work, isolated.bootstrap, str(local), hosts=isolated, **kwargs)
    cells = run_plan(harness, [(registry.get(job), (FaultClass.DRIVER_PARTITION,))])
    print(format_matrix(cells))
    (cell,) = cells
    assert cell.status is CellStatus.AS_EXPECTED, cell.error or cell.observed
    (result,) = cell.results
    bound = registry.get(job).cell(FaultClass.DRIVER_PARTITION).bound_s  # type: ignore[union-attr]
    assert result.run_seconds["liveness"] <= bound
    print(f"{job}: {result.crash}: {result.note}; liveness {result.run_seconds['liveness']:.1f}s")
    assert network.DRIVER_HOST not in network.hosts()  # removed with the cell


@pytest.mark.timeout(1800)
def test_driver_cut_before_the_kafka_record_leaves_the_job_precise_and_live(isolated, tmp_path):
    """Every slice committed, the driver cut before it records the batch (a kafka-python
    transaction to the broker): local mode's output, a batch committed after the heal."""
    local = derive_profile("faults", tmp_path / "local.toml", bootstrap=isolated.bootstrap)
    assert_precise_and_live(isolated, local, "exactly_once_kafka", timeout_s=600)


@pytest.mark.timeout(1800)
def test_driver_cut_before_the_delta_commit_leaves_the_job_precise_and_live(isolated, tmp_path):
    """Every task staged its Parquet on the store, the driver cut before it commits the Delta
    log there: local mode's table, a batch committed after the heal."""
    local = derive_profile(
        isolated.profile, tmp_path / "local.toml", settings={"master": "local[2,2]"}
    )
    root = f"s3a://{isolated.store.bucket}/tests/driver-partition-{uuid.uuid4().hex[:8]}"
    assert_precise_and_live(
        isolated,
        local,
        "exactly_once_delta",
        timeout_s=600,
        out_root=root,
        storage=isolated.store.settings(),  # the profiles' own store, kept by --storage s3
    )
