"""A real Spark standalone cluster: master + 2 workers x 1 core, each worker on a host of its own.

``scripts/cluster.sh`` starts the master and the workers (pyspark's ``spark-class``) on free
ports, the workers on two loopback addresses (127.0.0.2 and 127.0.0.3), so Spark sees two
hosts as on a real cluster. ``scripts/submit.sh`` submits ``jobs/exactly_once_delta.py``
(two-phase Delta sink: Parquet staged by Python tasks on the executors, committed on the
driver) with a profile that points at the cluster. The table must equal the one the same
pipeline writes in local mode.

The fault matrix's ``speculation`` cells run here too (in CI those of :data:`CI_SPECULATED`;
the others are heavy, ``--heavy``): Spark speculates only off a local master
and runs a speculative copy only on a host without an attempt of the task, so they need this
cluster. Each job whose cell has a straggler point gets one (the point sleeps on task attempt 0),
Spark's copy races it on the other host, and the output must still be what the job declares.
"""

from __future__ import annotations

import json
import subprocess

import pytest
from chispa import assert_df_equality

from connectors.demo_events import produce_events
from jobs import registry
from spark_ext.jobrun import REPO, job_environment
from spark_ext.recovery import FaultClass, RecoveryHarness
from spark_ext.recovery.matrix import CellStatus, format_matrix, run_plan
from tests.conftest import await_done, free_ports

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
#: The ones CI runs (a task per slice fencing its speculative copy, and the tracker's gate);
#: the others are heavy (the suite must stay under 35 minutes).
CI_SPECULATED = ["exactly_once_kafka", "tracker_windows"]

EVENTS = 200
COLUMNS = ["event_id", "user_id", "amount", "event_time", "topic", "partition", "offset"]


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


def master_json(ui: int) -> dict:
    import urllib.request

    with urllib.request.urlopen(f"http://127.0.0.1:{ui}/json/", timeout=10) as resp:
        return json.load(resp)


def test_exactly_once_job_on_the_standalone_cluster_equals_local_mode(
    cluster, spark, kafka_bootstrap, new_topic, tmp_path
):
    folder, master, ui = cluster
    alive = [w["host"] for w in master_json(ui)["workers"] if w["state"] == "ALIVE"]
    assert sorted(alive) == sorted(WORKER_HOSTS)

    topic = new_topic("cluster", partitions=3)
    produce_events(kafka_bootstrap, topic, EVENTS, malformed_every=20)
    profile = cluster_profile(master, tmp_path)

    # 1. spark-submit to the cluster.
    table = tmp_path / "cluster" / "events"
    submitted = subprocess.run(
        [
            *("bash", "scripts/submit.sh", "jobs/exactly_once_delta.py"),
            *("--profile", str(profile), "--topic", topic, "--table", str(table)),
            *("--checkpoint", str(tmp_path / "cluster" / "_chk"), "--sink-id", "events"),
            *("--mode", "two_phase"),
        ],
        cwd=REPO,
        env=job_environment(),
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert submitted.returncode == 0, submitted.stdout[-3000:] + submitted.stderr[-5000:]

    # The application ran on the cluster: one executor JVM on each worker, each with its logs.
    apps = master_json(ui)["completedapps"]
    assert len(apps) == 1 and apps[0]["cores"] == 2
    for worker in ("worker-0", "worker-1"):
        executors = list((folder / worker).glob(f"{apps[0]['id']}/*/stderr"))
        assert executors, f"no executor ran on {worker}"

    # 2. The same pipeline in local mode (the test session), on the same topic.
    from connectors.sinks import Trigger, exactly_once_to_delta
    from jobs.exactly_once_delta import events_stream

    local_table = tmp_path / "local" / "events"
    query = exactly_once_to_delta(
        events_stream(spark, kafka_bootstrap, topic, None),
        local_table,
        sink_id="events",
        checkpoint=tmp_path / "local" / "_chk",
        mode="two_phase",
        trigger=Trigger(available_now=True),
    )
    await_done(query, 600)
    assert query.exception() is None

    on_cluster = spark.read.format("delta").load(str(table)).select(*COLUMNS)
    local = spark.read.format("delta").load(str(local_table)).select(*COLUMNS)
    assert on_cluster.count() == EVENTS
    assert_df_equality(on_cluster, local, ignore_row_order=True, ignore_nullable=True)


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
