"""A real Spark standalone cluster: master + 2 workers x 1 core, each worker on a loopback host.

``scripts/cluster.sh`` starts the master and the workers (pyspark's ``spark-class``) on free
ports, the workers on two loopback addresses (127.0.0.2 and 127.0.0.3), so Spark sees two
hosts as on a real cluster. That a job on a cluster writes what local mode writes is shown on
hosts that share nothing with the driver but the network (tests/cluster/test_isolated_hosts.py).

The fault matrix's ``speculation`` cells run here (in CI those of :data:`CI_SPECULATED`;
the others are heavy, ``--heavy``): Spark speculates only off a local master
and runs a speculative copy only on a host without an attempt of the task, so they need this
cluster. Each job whose cell has a straggler point gets one (the point sleeps on task attempt 0),
Spark's copy races it on the other host, and the output must still be what the job declares.
"""

from __future__ import annotations

import subprocess

import pytest

from jobs import registry
from spark_ext.jobrun import REPO
from spark_ext.recovery import FaultClass, RecoveryHarness
from spark_ext.recovery.matrix import CellStatus, format_matrix, run_plan
from tests.conftest import free_ports

pytestmark = pytest.mark.integration

#: A host per worker: one machine, two hosts for Spark's scheduler.
WORKER_HOSTS = ("127.0.0.2", "127.0.0.3")
#: Every job whose ``speculation`` cell has a straggler; the jobs that refuse speculation (no
#: point, a typed error) need no cluster: tests/spark_ext/recovery/test_fault_matrix.py runs one.
SPECULATED = [
    n
    for n in registry.names()
    if (cell := registry.get(n).cell(FaultClass.SPECULATION)) and cell.point is not None
]
#: The one CI runs (a task per slice fencing its speculative copy); the others, the tracker's
#: gate among them, are heavy (the suite must stay under 35 minutes).
CI_SPECULATED = ["exactly_once_kafka"]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """A running cluster: its folder, master URL and web UI port; stopped at the end."""
    folder = tmp_path_factory.mktemp("cluster")
    port, ui = free_ports(2)
    args = ["--dir", str(folder), "--port", str(port), "--webui-port", str(ui)]
    hosts = ["--worker-hosts", ",".join(WORKER_HOSTS), "--cores", "1"]
    started = subprocess.run(
        ["bash", "scripts/cluster.sh", "start", *args, *hosts],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    try:  # a partial start (the master up, a worker not) is stopped too
        assert started.returncode == 0, started.stdout + started.stderr
        yield folder, f"spark://127.0.0.1:{port}", ui
    finally:
        subprocess.run(["bash", "scripts/cluster.sh", "stop", *args], cwd=REPO, timeout=120)


def cluster_profile(master: str, folder):
    """``conf/cluster.toml`` pointed at this cluster's master."""
    profile = folder / "cluster.toml"
    profile.write_text(
        (REPO / "conf" / "cluster.toml").read_text().replace("spark://127.0.0.1:7077", master)
    )
    return profile


def test_speculative_copies_on_the_other_host_leave_every_output_as_declared(
    cluster, kafka_bootstrap, tmp_path
):
    speculate(cluster, kafka_bootstrap, tmp_path, CI_SPECULATED)


@pytest.mark.heavy
def test_speculative_copies_of_every_other_job_leave_every_output_as_declared(
    cluster, kafka_bootstrap, tmp_path
):
    speculate(cluster, kafka_bootstrap, tmp_path, [j for j in SPECULATED if j not in CI_SPECULATED])


def speculate(cluster, kafka_bootstrap, tmp_path, jobs: list[str]) -> None:
    """Run the ``speculation`` cell of each of ``jobs`` on the cluster: each as declared."""
    _, master, _ = cluster
    # both two-phase Delta and Kafka paths, DeltaDedupSink and the tracker's gate at least
    assert len(SPECULATED) >= 5, SPECULATED
    harness = RecoveryHarness(
        tmp_path / "matrix",
        kafka_bootstrap,
        profile="test",
        timeout_s=600,
        speculation_profile=str(cluster_profile(master, tmp_path)),
    )
    assert set(CI_SPECULATED) <= set(SPECULATED), CI_SPECULATED
    plan = [(registry.get(job), (FaultClass.SPECULATION,)) for job in jobs]
    cells = run_plan(harness, plan, jobs_parallel=2)
    print(format_matrix(cells))
    # Each cell is judged only if a later attempt of the straggler's task reached its point
    # (spark_ext.recovery.speculation.assert_speculated): a run without a copy is an ERROR.
    failed = {c.job: c.error or c.observed for c in cells if c.status is not CellStatus.AS_EXPECTED}
    assert not failed, failed
