"""A killed job leaves no process behind, also none in a process group of its own (PySpark's
worker daemon and its workers): run_job kills the job's whole session."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from spark_ext.jobrun import REPO, run_job


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()[0] != b"Z"
    except OSError:
        return False


def test_a_killed_job_takes_its_own_process_group_children_with_it(tmp_path):
    pid_file = tmp_path / "child.pid"
    run = run_job(
        "tests.spark_ext._session_child_job",
        [str(pid_file)],
        kill_after_s=3,
        timeout_s=60,
        cwd=REPO,
    )
    assert run.killed, run.output_tail
    child = int(pid_file.read_text())
    deadline = time.monotonic() + 2
    while alive(child) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not alive(child), f"process {child} outlived the killed job"


@pytest.mark.integration
def test_a_killed_spark_job_leaves_no_scratch_folder_behind(tmp_path):
    """Spark removes its local folders in a shutdown hook a SIGKILL never runs: each killed run
    left its ``spark-*`` and ``blockmgr-*`` folders in /tmp (47 GB after a day of crash tests,
    then ``No space left on device``). run_job gives the job scratch folders of its own."""
    report = tmp_path / "scratch.txt"
    run = run_job(
        "tests.spark_ext._spark_scratch_job",
        [str(report)],
        kill_when=report.exists,
        timeout_s=120,
        cwd=REPO,
    )
    assert run.killed, run.output_tail
    folders = report.read_text().split()
    assert folders, "the job reported no scratch folder"
    left = [f for f in folders if Path(f).exists()]
    assert not left, f"left behind by a killed job: {left}"
