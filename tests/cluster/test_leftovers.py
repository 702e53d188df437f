"""Nothing of an isolated cluster outlives its owner: the watchdog removes the hosts (a
``driver-partition`` cell's driver host too), the bridge and every process of a host once the
owner is killed, and a cluster whose watchdog was killed too is removed by ``cluster.py clean``
(what the next ``start`` does first). No Spark: the hosts are made and a process put in a
worker's and the driver's, as a worker and a driver would be."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator

import pytest

from jobs.isolated import ClusterCommandError, isolated_cluster
from spark_ext.recovery import network
from tests.cluster.conftest import CLUSTER, load_script

pytestmark = pytest.mark.integration


@pytest.fixture
def owner() -> Iterator[subprocess.Popen[bytes]]:
    """The process owning the test's hosts; however the test ends, they are removed after it."""
    proc = subprocess.Popen(["sleep", "600"])
    try:
        yield proc
    finally:
        proc.kill()
        proc.wait()
        subprocess.run([sys.executable, CLUSTER, "clean"], capture_output=True, timeout=60)


def made_hosts(folder, owner: int) -> list[subprocess.Popen[bytes]]:
    """Two isolated hosts owned by ``owner`` and the driver's host of a ``driver-partition``
    cell; returns a process running on the first and one on the driver's."""
    assert not network.hosts(), f"an isolated cluster runs already: {network.hosts()}"
    script = load_script()
    args = ["start", "--isolated", "--hosts", "2", "--dir", str(folder), "--owner-pid", str(owner)]
    cluster = script.IsolatedCluster(script.parser().parse_args(args))
    cluster.make_hosts()
    cluster._record_owner(owner)
    network.add_host(network.DRIVER_HOST, network.DRIVER_HOST_ADDRESS)
    return [
        subprocess.Popen(network.in_host(host, ["sleep", "600"]), start_new_session=True)
        for host in (network.host_name(0), network.DRIVER_HOST)
    ]


def gone(processes: list[subprocess.Popen[bytes]]) -> None:
    assert [p.wait(timeout=10) for p in processes] == [-9, -9]  # SIGKILLed with their hosts
    assert network.hosts() == []
    assert not network.ip("link", "show", network.BRIDGE, check=False)


def test_a_killed_owner_leaves_no_host_no_bridge_and_no_process(tmp_path, owner):
    worker, driver = made_hosts(tmp_path, owner.pid)
    watchdog = subprocess.Popen(
        [sys.executable, CLUSTER, "watch", "--dir", str(tmp_path)], start_new_session=True
    )
    assert network.host_pids(network.host_name(0)) == [worker.pid]
    assert network.host_pids(network.DRIVER_HOST) == [driver.pid]
    owner.kill()  # the test run killed: its watchdog stops what it owned
    assert watchdog.wait(timeout=30) == 0
    gone([worker, driver])


def test_what_a_killed_run_left_is_removed_by_the_next_start(tmp_path, owner):
    processes = made_hosts(tmp_path, owner.pid)
    # While its owner lives, the cluster is refused to others and left alone.
    done = subprocess.run([sys.executable, CLUSTER, "clean"], capture_output=True, text=True)
    assert done.returncode != 0 and "still runs" in done.stdout + done.stderr
    owner.kill()  # owner and watchdog both killed: nothing stopped the cluster
    owner.wait()
    done = subprocess.run([sys.executable, CLUSTER, "clean"], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    gone(processes)


def test_a_second_start_is_refused_and_leaves_the_running_cluster_alone(tmp_path, owner):
    """``spark-ext matrix --cluster isolated`` while another cluster runs: a typed error, and
    the running cluster keeps its hosts and processes (no stop of what it did not start)."""
    worker, driver = made_hosts(tmp_path / "first", owner.pid)
    with pytest.raises(ClusterCommandError, match="still runs"):
        with isolated_cluster(tmp_path / "second"):
            pass
    assert network.host_pids(network.host_name(0)) == [worker.pid]  # untouched
    assert network.host_pids(network.DRIVER_HOST) == [driver.pid]
    assert worker.poll() is None and driver.poll() is None
    owner.kill()
    owner.wait()
    subprocess.run([sys.executable, CLUSTER, "clean"], capture_output=True, timeout=60)
    gone([worker, driver])
