"""Run a job in its own process group, optionally killed with SIGKILL, and restart it.

This is how crash tests and the recovery harness kill "the driver": the job runs as
``python -m <module> <args>`` in a new session (its own process group), so its Python driver,
the JVM it launches and the Python workers all die together, either at a named crash point
(``SPARK_EXT_CRASH_AT``, see :mod:`spark_ext.crash`) or after a delay chosen by the caller.

Example
-------
>>> run = run_job("jobs.ingest_events", ["--topic", "t"], crash_at="ingest.after_write@1")
>>> run.killed                                     # doctest: +SKIP
True
>>> run_job("jobs.ingest_events", ["--topic", "t"]).ok   # restart from the checkpoint  # doctest: +SKIP
True
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from spark_ext.crash import CRASH_ENV, JOB_SESSION_ENV

log = logging.getLogger(__name__)

REPO = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class JobRun:
    """How one run of a job ended."""

    returncode: int
    seconds: float
    output_tail: str

    @property
    def killed(self) -> bool:
        """Ended by SIGKILL (a crash point or the caller's timer)."""
        return self.returncode == -signal.SIGKILL

    @property
    def ok(self) -> bool:
        return self.returncode == 0


def job_environment(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment a job subprocess gets: this interpreter, loopback, no crash point."""
    env = {k: v for k, v in os.environ.items() if k != CRASH_ENV}
    env.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    env["PYSPARK_PYTHON"] = sys.executable
    env["PYSPARK_DRIVER_PYTHON"] = sys.executable
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    env[JOB_SESSION_ENV] = "1"  # run_job starts the job as the leader of a new session
    env.update(extra or {})
    return env


def run_job(
    module: str,
    args: Sequence[str] = (),
    crash_at: str | None = None,
    kill_after_s: float | None = None,
    timeout_s: float = 600.0,
    env: Mapping[str, str] | None = None,
) -> JobRun:
    """Run ``python -m module args`` to its end, or until it is killed.

    Parameters
    ----------
    crash_at
        A crash point spec ``name`` or ``name@batch_id`` put in ``SPARK_EXT_CRASH_AT``.
    kill_after_s
        Kill the job's process group with SIGKILL after this many seconds.
    timeout_s
        A job still running after this long is killed and :class:`TimeoutError` raised.
    """
    extra = dict(env or {})
    if crash_at:
        extra[CRASH_ENV] = crash_at
    start = time.monotonic()
    with tempfile.TemporaryFile() as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", module, *args],
            cwd=REPO,
            env=job_environment(extra),
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        deadline = start + (kill_after_s if kill_after_s is not None else timeout_s)
        try:
            proc.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            _kill_group(proc)
            if kill_after_s is None:
                raise TimeoutError(f"{module} still running after {timeout_s}s") from None
        _kill_group(proc)  # leftovers of a job that exited (a stray Python worker, the JVM)
        out.seek(0)
        tail = out.read()[-8000:].decode(errors="replace")
    run = JobRun(proc.returncode, time.monotonic() - start, tail)
    log.info("%s %s -> rc %s in %.1fs", module, " ".join(args), run.returncode, run.seconds)
    return run


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait()
