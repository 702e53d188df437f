"""The harness's kill drivers: a job killed at each declared step in turn, or at random moments
while it streams, each run restarting from the checkpoint the killed one left (docs/design.md,
"Fault points")."""

from __future__ import annotations

import logging
import random
from collections.abc import Callable, Sequence

from spark_ext.jobrun import REPO, JobRun, run_job
from spark_ext.recovery.errors import FaultNotFired, JobRunFailed

__all__ = ["JOB_TIMEOUT_S", "batches_for", "kill_at_each_point", "kill_at_random_times"]

log = logging.getLogger(__name__)

JOB_TIMEOUT_S = 420.0


def kill_at_each_point(module: str, args: Sequence[str], points: Sequence[str]) -> list[JobRun]:
    """Run the job killed at each crash point (``name@batch``) in turn, each run on the
    checkpoint the last left, then to its end (:class:`FaultNotFired`, :class:`JobRunFailed`)."""
    runs = []
    for point in points:
        run = run_job(module, args, fault=point, timeout_s=JOB_TIMEOUT_S)
        # Its own marker, not just "died of SIGKILL" (an OOM kill or a kill elsewhere is not it).
        if not (run.killed and run.fired(point.partition("@")[0], "kill")):
            raise FaultNotFired(module, f"{point}:kill", run)
        runs.append(run)
    return [*runs, _final(module, args)]


def _final(module: str, args: Sequence[str]) -> JobRun:
    """The run after the kills, which must finish cleanly."""
    final = run_job(module, args, timeout_s=JOB_TIMEOUT_S)
    if not final.ok:
        raise JobRunFailed(module, "final", final)
    return final


def kill_at_random_times(
    module: str,
    args: Sequence[str],
    kills: int,
    seed: int,
    progress: Callable[[], int],
    max_delay_s: float = 2.5,
) -> list[JobRun]:
    """Kill the job ``kills`` times, each a seeded delay (up to ``max_delay_s``) after
    ``progress()`` (the sink's recorded batch) moved in that run, then let it finish."""
    rng = random.Random(seed)
    runs = []
    for _ in range(kills):
        start = progress()
        run = run_job(
            module,
            args,
            kill_when=lambda: progress() > start,  # noqa: B023 (used within this pass)
            kill_after_s=rng.uniform(0.0, max_delay_s),
            timeout_s=JOB_TIMEOUT_S,
            cwd=REPO,
        )  # traced: run.last_step is the step the kill landed after
        runs.append(run)
        if run.ok:
            return runs
        if not run.killed:
            raise JobRunFailed(module, "killed", run)
        # Where it landed; it may precede every step (a killed run's progress settled at start).
        where = run.last_step or "the start-up, before any step"
        log.warning("random kill %d of %d landed after %s", len(runs), kills, where)
    return [*runs, _final(module, args)]


def batches_for(kills: int, events: int) -> int:
    """``maxOffsetsPerTrigger`` giving enough micro-batches for ``kills`` kills mid-stream."""
    # A two-phase Delta batch takes ~0.3 s: a 1 s delay is 3-4 batches (sizes the input).
    batches = 6 * kills + 3
    return max(3, -(-events // batches // 3) * 3)
