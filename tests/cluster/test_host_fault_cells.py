"""Host-fault cells as data and their liveness figure, without a cluster (the cells on one:
test_isolated_hosts.py)."""

from __future__ import annotations

import os

import pytest

from spark_ext.config import load_profile
from spark_ext.crash import declare
from spark_ext.recovery import FaultCell, FaultClass, HarnessContext, RecoveryClass, network
from spark_ext.recovery.faults import HOST_HOLD_S
from spark_ext.recovery.host_faults import first_commit_after, on_driver_host
from tests.cluster.conftest import load_script

TASK = declare("hosts.1.in_task", "executor", "test: a task's step")
DRIVER = declare("hosts.2.on_driver", "driver", "test: a driver step")


def test_host_faults_need_a_task_point_a_liveness_bound_and_a_partition_its_seconds():
    with pytest.raises(ValueError, match="executor point"):
        FaultCell(FaultClass.HOST_LOSS, DRIVER, 1, bound_s=60)
    with pytest.raises(ValueError, match="liveness bound"):
        FaultCell(FaultClass.HOST_LOSS, TASK, 1)
    with pytest.raises(ValueError, match="seconds"):
        FaultCell(FaultClass.PARTITION, TASK, 1, bound_s=60)
    cut = FaultCell(FaultClass.PARTITION, TASK, 1, RecoveryClass.PRECISE, 10, 0, bound_s=60)
    # The task holds at the point while the harness finds its host and acts on it.
    assert cut.spec() == f"hosts.1.in_task@1#0:sleep={HOST_HOLD_S:g}"


def test_slow_link_holds_a_task_at_its_point_and_needs_a_bound_and_a_shape_of_shares():
    with pytest.raises(ValueError, match="liveness bound"):
        FaultCell(FaultClass.SLOW_LINK, TASK, 0)
    slowed = FaultCell(FaultClass.SLOW_LINK, TASK, 0, RecoveryClass.PRECISE, 0, 0, bound_s=120)
    assert slowed.spec() == f"hosts.1.in_task@0#0:sleep={HOST_HOLD_S:g}"
    with pytest.raises(ValueError, match="share"):
        network.LinkShape(loss=2.0)
    # The filter's threshold: the loss share of the kernel's 32-bit random numbers.
    assert network._random_share(0.5).split(",")[2] == f"53 0 1 {2**31}"
    assert network._random_share(1.0).split(",")[2] == f"53 0 1 {2**32 - 1}"


def test_a_driver_partition_needs_a_driver_point_and_a_cut_the_commit_meets():
    with pytest.raises(ValueError, match="driver point"):
        FaultCell(FaultClass.DRIVER_PARTITION, TASK, 1, seconds=20, bound_s=60)
    with pytest.raises(ValueError, match="twice the hold"):  # the commit would follow the heal
        FaultCell(FaultClass.DRIVER_PARTITION, DRIVER, 1, seconds=HOST_HOLD_S, bound_s=60)
    cut = FaultCell(FaultClass.DRIVER_PARTITION, DRIVER, 1, seconds=2 * HOST_HOLD_S, bound_s=60)
    # The driver holds at the point while the harness cuts it, then commits into the cut.
    assert cut.spec() == f"hosts.2.on_driver@1:sleep={HOST_HOLD_S:g}"


def test_a_job_runs_its_driver_on_the_driver_host_in_the_same_process():
    seen = []

    def runner(module, args, **kwargs):
        seen.append((module, list(args), kwargs))

    on_driver_host(runner)("jobs.x", ["--a", "1"], timeout_s=5)
    assert seen == [
        (
            "spark_ext.recovery.in_host",
            [network.DRIVER_HOST, "jobs.x", "--a", "1"],
            {"trace": True, "timeout_s": 5},
        )
    ]
    command = network.in_host(network.DRIVER_HOST, ["python", "-m", "jobs.x"])
    assert command == ["ip", "netns", "exec", "sxh-d", "python", "-m", "jobs.x"]


def test_liveness_is_the_first_commit_written_after_the_heal(tmp_path):
    class Case:
        def checkpoints(self, ctx, slot):
            return [tmp_path / "_chk"]

    commits = tmp_path / "_chk" / "commits"
    commits.mkdir(parents=True)
    for batch, written_at in ((0, 100.0), (1, 130.0), (2, 112.5)):
        (commits / str(batch)).write_text("v1")
        os.utime(commits / str(batch), (written_at, written_at))
    (commits / ".2.crc").write_text("")
    ctx = HarnessContext(tmp_path, "b", "p", "t")
    assert first_commit_after(Case(), ctx, ctx.slot("x"), at=110.0) == 2.5  # type: ignore[arg-type]
    assert first_commit_after(Case(), ctx, ctx.slot("x"), at=131.0) is None  # type: ignore[arg-type]


def test_isolated_hosts_take_no_loopback_worker_hosts(tmp_path):
    script = load_script()
    hosts = ["--worker-hosts", "127.0.0.2,127.0.0.3"]
    with pytest.raises(SystemExit, match="drop --worker-hosts"):
        script.main(["start", "--isolated", "--dir", str(tmp_path), *hosts])
    assert not (tmp_path / "cluster.json").exists()


def test_the_isolated_profile_with_the_store_is_a_valid_profile_reaching_the_bridge(tmp_path):
    script = load_script()
    args = script.parser().parse_args(["start", "--isolated", "--store", "--dir", str(tmp_path)])
    path = tmp_path / "isolated.toml"
    path.write_text(script.IsolatedCluster(args).profile(store=True))
    profile = load_profile(str(path))
    assert profile.storage.endpoint == f"http://{network.SERVICE_ADDRESS}:9000"
    assert profile.kafka.bootstrap_servers == f"{network.SERVICE_ADDRESS}:9092"
