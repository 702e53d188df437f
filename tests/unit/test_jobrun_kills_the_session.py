"""A killed job leaves no process behind, also none in a process group of its own (PySpark's
worker daemon and its workers): run_job kills the job's whole session."""

from __future__ import annotations

import time

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
        "tests.unit._session_child_job", [str(pid_file)], kill_after_s=3, timeout_s=60, cwd=REPO
    )
    assert run.killed, run.output_tail
    child = int(pid_file.read_text())
    deadline = time.monotonic() + 2
    while alive(child) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not alive(child), f"process {child} outlived the killed job"
