"""Crash points fire only where and when the crash test asks, and kill the process group."""

from __future__ import annotations

import sys
import time

import pytest

from spark_ext.crash import CRASH_ENV, crash_requested
from spark_ext.jobrun import run_job


@pytest.mark.parametrize(
    ("spec", "name", "batch", "expected"),
    [
        (None, "sink.1.staged", 0, False),
        ("sink.1.staged", "sink.1.staged", 3, True),
        ("sink.1.staged", "sink.2.committed", 3, False),
        ("sink.1.staged@2", "sink.1.staged", 3, False),
        ("sink.1.staged@3", "sink.1.staged", 3, True),
        ("sink.1.staged@3", "sink.1.staged", None, True),
    ],
)
def test_crash_requested_matches_name_and_batch(monkeypatch, spec, name, batch, expected) -> None:
    if spec is None:
        monkeypatch.delenv(CRASH_ENV, raising=False)
    else:
        monkeypatch.setenv(CRASH_ENV, spec)
    assert crash_requested(name, batch) is expected


def test_crash_point_kills_the_whole_process_group(tmp_path) -> None:
    """A child of the job (like Spark's JVM) dies with it: nothing survives the crash."""
    marker = tmp_path / "child.pid"
    script = tmp_path / "job_with_child.py"
    script.write_text(
        "import subprocess, sys, time\n"
        "from spark_ext.crash import crash_point\n"
        f"child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
        f"open({str(marker)!r}, 'w').write(str(child.pid))\n"
        "crash_point('demo.step', 1)\n"
        "print('not reached')\n"
    )
    (tmp_path / "__init__.py").write_text("")
    sys.path.insert(0, str(tmp_path.parent))
    try:
        run = run_job(
            f"{tmp_path.name}.job_with_child",
            crash_at="demo.step@1",
            env={"PYTHONPATH": str(tmp_path.parent)},
            timeout_s=60,
        )
    finally:
        sys.path.remove(str(tmp_path.parent))
    assert run.killed
    assert "not reached" not in run.output_tail
    assert not _running(int(marker.read_text()))


def _running(pid: int) -> bool:
    """Alive and not a zombie (a killed orphan may wait to be reaped by init)."""
    for _ in range(50):
        try:
            state = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0]
        except FileNotFoundError:
            return False
        if state in {"Z", "X"}:
            return False
        time.sleep(0.1)
    return True


def test_job_without_crash_point_runs_to_its_end() -> None:
    run = run_job("json.tool", ["--help"], crash_at="never.reached", timeout_s=60)
    assert run.ok and not run.killed


def test_crash_point_in_a_worker_with_its_own_group_kills_the_driver(tmp_path) -> None:
    """PySpark's daemon puts Python workers in their own process group; a crash point reached
    there must still kill the driver (the job's session leader), not just the worker."""
    script = tmp_path / "job_with_worker.py"
    script.write_text(
        "import os, subprocess, sys, time\n"
        "worker = (\n"
        "    'import os, time\\n'\n"
        "    'os.setpgid(0, 0)\\n'\n"
        "    'from spark_ext.crash import crash_point\\n'\n"
        "    'crash_point(\"demo.task\", 2)\\n'\n"
        ")\n"
        "subprocess.Popen([sys.executable, '-c', worker]).wait()\n"
        "time.sleep(30)\n"
        "print('driver survived')\n"
    )
    (tmp_path / "__init__.py").write_text("")
    run = run_job(
        f"{tmp_path.name}.job_with_worker",
        crash_at="demo.task@2",
        env={"PYTHONPATH": str(tmp_path.parent)},
        timeout_s=60,
    )
    assert run.killed
    assert run.seconds < 25
    assert "driver survived" not in run.output_tail
