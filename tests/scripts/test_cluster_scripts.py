"""The standalone-cluster scripts tell the truth without a cluster: no master is said plainly,
a submit to a master that does not answer stops at once, stop removes the workers' app folders.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time

from spark_ext.jobrun import REPO
from tests.conftest import free_ports

CLUSTER = REPO / "scripts" / "cluster.py"


def test_status_without_a_master_says_no_master_runs(tmp_path):
    port, ui = free_ports(2)
    ports = ["--port", str(port), "--webui-port", str(ui)]
    out = subprocess.run(
        [sys.executable, str(CLUSTER), "status", "--dir", str(tmp_path), *ports],
        capture_output=True,
        text=True,
    )
    assert out.returncode == 1
    assert "no master running" in out.stdout
    assert "workers alive" not in out.stdout


def test_submit_to_a_master_that_does_not_answer_stops_at_once_without_a_java_trace(tmp_path):
    profile = tmp_path / "nomaster.toml"
    profile.write_text(f'[spark]\nmaster = "spark://127.0.0.1:{free_ports(1)[0]}"\n')
    started = time.monotonic()
    submit = ["bash", str(REPO / "scripts" / "submit.sh"), "jobs/exactly_once_delta.py"]
    out = subprocess.run(
        [*submit, "--profile", str(profile)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={**os.environ, "PYSPARK_PYTHON": sys.executable},  # wherever its venv is
        timeout=120,
    )
    assert out.returncode == 2
    assert time.monotonic() - started < 30
    assert "no Spark master answers" in out.stdout
    assert "Exception" not in out.stderr and "at org.apache" not in out.stderr


def test_stop_removes_the_per_application_folders_of_the_workers(tmp_path):
    app = tmp_path / "worker-0" / "app-20260101000000-0000" / "0"
    app.mkdir(parents=True)
    (app / "delta-spark.jar").write_bytes(b"x" * 1024)
    (tmp_path / "worker-0" / "keep.log").write_text("worker log")
    out = subprocess.run(
        [sys.executable, str(CLUSTER), "stop", "--dir", str(tmp_path)],
        capture_output=True,
        text=True,
    )
    assert out.returncode == 0
    assert not (tmp_path / "worker-0" / "app-20260101000000-0000").exists()
    assert (tmp_path / "worker-0" / "keep.log").exists()


def test_worker_hosts_must_name_one_host_per_worker_and_nothing_starts_otherwise(tmp_path):
    port, ui = free_ports(2)
    ports = ["--port", str(port), "--webui-port", str(ui)]
    hosts = ["--workers", "3", "--worker-hosts", "127.0.0.2,127.0.0.3"]
    # --worker-hosts sets the worker count; --workers must not contradict it.
    out = subprocess.run(
        [sys.executable, str(CLUSTER), "start", "--dir", str(tmp_path), *ports, *hosts],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode != 0
    assert "3 workers but 2 worker hosts" in out.stdout + out.stderr
    assert not (tmp_path / "cluster.json").exists()
