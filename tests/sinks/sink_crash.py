"""Crash-test drivers shared by the sink tests: kill a job at each step, or at random times."""

from __future__ import annotations

import logging
import os
import random
from collections.abc import Sequence

from spark_ext.jobrun import JobRun, run_job

log = logging.getLogger(__name__)

#: Kills at random times per two-phase sink. The issue asks for 20; CI runs fewer to keep
#: tests/sinks inside its time budget: ``SPARK_EXT_RANDOM_KILLS=20`` runs the full count.
RANDOM_KILLS = int(os.environ.get("SPARK_EXT_RANDOM_KILLS", "2"))
JOB_TIMEOUT_S = 420.0


def kill_at_each_point(module: str, args: Sequence[str], points: Sequence[str]) -> list[JobRun]:
    """Run the job once per crash point (``name@batch``), each killed there, then to its end.

    Every run restarts from the checkpoint the killed one left. Asserts each point was
    reached (the run was SIGKILLed) and that the last run finished cleanly.
    """
    runs = []
    for point in points:
        run = run_job(module, args, crash_at=point, timeout_s=JOB_TIMEOUT_S)
        assert run.killed, f"crash point {point} was not reached:\n{run.output_tail}"
        runs.append(run)
    final = run_job(module, args, timeout_s=JOB_TIMEOUT_S)
    assert final.ok, final.output_tail
    runs.append(final)
    return runs


def kill_at_random_times(
    module: str,
    args: Sequence[str],
    kills: int,
    seed: int,
    window_s: tuple[float, float] = (8.0, 22.0),
) -> list[JobRun]:
    """Kill the job after a random delay (seeded), restart, repeat ``kills`` times, then finish.

    A run that finishes before its kill time ends the loop early (the output is complete);
    the caller checks how many kills landed.
    """
    rng = random.Random(seed)
    runs = []
    for _ in range(kills):
        delay = rng.uniform(*window_s)
        run = run_job(module, args, kill_after_s=delay, timeout_s=JOB_TIMEOUT_S)
        log.info("random kill after %.1fs: killed=%s", delay, run.killed)
        runs.append(run)
        if run.ok:
            return runs
        assert run.killed, run.output_tail
    final = run_job(module, args, timeout_s=JOB_TIMEOUT_S)
    assert final.ok, final.output_tail
    runs.append(final)
    return runs
