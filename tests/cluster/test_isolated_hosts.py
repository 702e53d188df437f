"""Executors on hosts of their own (scripts/cluster.py ``--isolated``): no task reads what the
driver wrote locally, and the exactly-once Kafka -> Kafka job gives local mode's output under
a host lost mid-batch and a host cut from the broker (docs/design.md, "Isolated hosts")."""

from __future__ import annotations

import json

import pytest

from jobs import registry
from spark_ext.jobrun import REPO, run_job
from spark_ext.recovery import FaultClass, RecoveryHarness, network
from spark_ext.recovery.matrix import CellStatus, format_matrix, run_plan
from spark_ext.recovery.profiles import derive_profile
from tests.cluster.conftest import HOSTS

pytestmark = pytest.mark.integration


def test_a_task_cannot_read_a_file_the_driver_just_wrote_locally(isolated, tmp_path):
    driver_file = tmp_path / "driver-only.txt"
    run = run_job(
        "tests.cluster._probe_job",
        ["--profile", isolated.profile, "--file", str(driver_file)],
        cwd=REPO,
        timeout_s=300,
    )
    assert run.ok, run.output_tail[-3000:]
    probe = json.loads(run.output_tail.split("PROBE ", 1)[1].splitlines()[0])
    # Tasks ran on every worker host, and on none of them did the driver's file exist.
    hosts = [network.host_address(i) for i in range(HOSTS)]
    assert probe["seen"] == [[h, False] for h in hosts]
    assert probe["read"] == "failed: FileNotFoundError"
    assert probe["driver"] == "written by the driver"


def test_host_loss_and_partition_leave_the_kafka_job_precise_and_live(isolated, tmp_path):
    """Clean run in local mode (``O_e``); faulted run and restart on the cluster: ``precise``
    is local mode's output, after a host lost inside a transaction and a host cut from the
    broker for 10 s, each followed by a committed batch within the job's bound."""
    local = derive_profile("faults", tmp_path / "local.toml", bootstrap=isolated.bootstrap)
    harness = RecoveryHarness(
        tmp_path / "matrix",
        isolated.bootstrap,
        profile=str(local),
        timeout_s=600,
        hosts=isolated,
    )
    faults = (FaultClass.HOST_LOSS, FaultClass.PARTITION)
    cells = run_plan(harness, [(registry.get("exactly_once_kafka"), faults)])
    print(format_matrix(cells))
    failed = {
        c.fault: c.error or c.observed for c in cells if c.status is not CellStatus.AS_EXPECTED
    }
    assert not failed, failed
    for c in cells:
        (result,) = c.results
        assert (
            result.run_seconds["liveness"]
            <= registry.get("exactly_once_kafka").cell(c.fault).bound_s
        )
        print(f"{c.fault}: {result.crash}: liveness {result.run_seconds['liveness']:.1f}s")
