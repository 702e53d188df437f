"""Run a job in its own session, killed whole (driver, JVM, workers) at a fault point or at a
moment the caller chooses, or not at all; the faults that fired come back from its fault log
(docs/design.md, "Fault points").

>>> run = run_job("jobs.ingest_events", fault="ingest.after_write@1")  # doctest: +SKIP
>>> run.fired("ingest.after_write")  # doctest: +SKIP
True
"""

from __future__ import annotations

import contextlib
import glob
import logging
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from spark_ext.crash import (
    FAULT_ENV,
    FAULT_LOG_ENV,
    FAULT_SETTINGS,
    JOB_SESSION_ENV,
    REACHED,
    TRACE_ENV,
    FaultSpec,
    fault_log_entries,
)

__all__ = [
    "JOB_LOG_FORMAT",
    "REPO",
    "JobRun",
    "job_environment",
    "relayed",
    "run_job",
]

log = logging.getLogger(__name__)

REPO = Path(__file__).resolve().parent.parent
#: How a job logs (``jobs.console`` sets it): :func:`run_job` relays its project's lines.
JOB_LOG_FORMAT = "%(asctime)s %(name)s %(message)s"
_OWN_LINE = re.compile(
    r"^\d{4}-\d\d-\d\d [\d:,]+ (?:spark_ext|connectors|jobs|__main__)[\w.]* (.*)$"
)


def relayed(line: str) -> str | None:
    """The message of a job's output line its own loggers wrote (one per batch among them),
    ``None`` for any other line (Spark's, a trace)."""
    m = _OWN_LINE.match(line)
    return m.group(1) if m else None


@dataclass(frozen=True)
class JobRun:
    """How one run of a job ended."""

    returncode: int
    seconds: float
    output_tail: str
    faults: tuple[dict[str, object], ...] = ()  # fired, from the run's fault log
    steps: tuple[dict[str, object], ...] = ()  # traced runs: every point reached, in order

    @property
    def last_step(self) -> str | None:
        """``point@batch`` of the last step reached (traced runs; ``None``: no step)."""
        last = self.steps[-1] if self.steps else None
        return None if last is None else f"{last['point']}@{last['batch']}"

    @property
    def killed(self) -> bool:
        """Ended by SIGKILL (a fault point, the caller's timer, or anything else, e.g. OOM)."""
        return self.returncode == -signal.SIGKILL

    def fired(self, point: str, kind: str | None = None) -> bool:
        """Whether the fault point ``point`` fired in this run (with ``kind``, if given)."""
        return any(f["point"] == point and (kind is None or f["kind"] == kind) for f in self.faults)

    @property
    def ok(self) -> bool:
        return self.returncode == 0


def job_environment(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment a job subprocess gets: this interpreter, loopback, no crash point."""
    env = {k: v for k, v in os.environ.items() if k not in FAULT_SETTINGS}
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
    kill_after_s: float | None = None,
    timeout_s: float = 600.0,
    env: Mapping[str, str] | None = None,
    fault: str | FaultSpec | None = None,
    cwd: str | os.PathLike[str] | None = None,
    kill_when: Callable[[], bool] | None = None,
    trace: bool | None = None,
    tmp_root: Path | None = None,
) -> JobRun:
    """Run ``python -m module args`` in ``cwd`` (default: the caller's) to its end, or kill it.

    ``fault``: a ``SPARK_EXT_FAULT`` spec. ``kill_after_s``: SIGKILL the job this long after
    its start, or after ``kill_when`` (polled every 0.2 s) first holds. ``trace``: log every
    point reached (:attr:`JobRun.steps`; default: on for those random kills). A job still
    running after ``timeout_s`` is killed and :class:`TimeoutError` raised. ``tmp_root``: where
    the run's folder (fault log, scratch) goes, default the system's; one the executors see on
    an isolated cluster (they log the faults of their tasks there).
    """
    spec = str(FaultSpec.parse(str(fault))) if fault else None
    if trace is None:
        trace = kill_after_s is not None or kill_when is not None
    start = time.monotonic()
    if tmp_root is not None:
        Path(tmp_root).mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="spark-ext-run-", dir=tmp_root) as tmp:
        scratch = Path(tmp) / "scratch"  # removed with the run however it ended
        scratch.mkdir()
        java = [os.environ.get("JAVA_TOOL_OPTIONS"), f"-Djava.io.tmpdir={scratch}"]
        extra = {
            "TMPDIR": str(scratch),
            "SPARK_LOCAL_DIRS": str(scratch),
            "JAVA_TOOL_OPTIONS": " ".join(filter(None, java)),
            FAULT_LOG_ENV: str(Path(tmp) / "faults.jsonl"),
            **(env or {}),
        }
        if spec:
            extra[FAULT_ENV] = spec
        if trace:
            extra[TRACE_ENV] = "1"
        with open(Path(tmp) / "output", "w+b") as out:
            proc = subprocess.Popen(
                [sys.executable, "-m", module, *args],
                cwd=cwd if cwd is not None else os.getcwd(),
                env=job_environment(extra),
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
            relay = _relay(Path(out.name), module.rpartition(".")[2], proc)
            try:
                _wait(proc, module, start, timeout_s, kill_after_s, kill_when)
            finally:
                _kill_group(proc)  # a timed-out job, or leftovers (a stray worker, the JVM)
                if relay is not None:
                    relay.join()
            out.seek(0)  # 40 kB: the cause, not only the query plan Spark prints after it
            tail = out.read()[-40000:].decode(errors="replace")
        entries = fault_log_entries(extra[FAULT_LOG_ENV])
    faults = tuple(e for e in entries if e["kind"] != REACHED)
    steps = tuple(e for e in entries if e["kind"] == REACHED)
    run = JobRun(proc.returncode, time.monotonic() - start, tail, faults, steps)
    landed = f", last step {run.last_step}" if trace and run.killed else ""
    log.info(
        "%s %s -> rc %s in %.1fs%s", module, " ".join(args), run.returncode, run.seconds, landed
    )
    return run


def _relay(output: Path, label: str, proc: subprocess.Popen[bytes]) -> threading.Thread | None:
    """A thread that logs each of the job's own lines (:func:`relayed`) as it arrives, as
    ``<label>: <message>``, until the job ended; none when INFO is not logged."""
    if not log.isEnabledFor(logging.INFO):
        return None

    def follow() -> None:
        with open(output, "rb") as f:
            pending = b""
            while True:
                ended = proc.poll() is not None
                pending += f.read()
                *lines, pending = pending.split(b"\n")
                for line in lines:
                    message = relayed(line.decode(errors="replace"))
                    if message is not None:
                        log.info("%s: %s", label, message)
                if ended:
                    return
                time.sleep(0.25)

    thread = threading.Thread(target=follow, name=f"relay-{label}", daemon=True)
    thread.start()
    return thread


def _wait(
    proc: subprocess.Popen[bytes],
    module: str,
    start: float,
    timeout_s: float,
    kill_after_s: float | None,
    kill_when: Callable[[], bool] | None,
) -> None:
    """Wait for the job to end or for the kill moment (``kill_after_s`` after the start, or
    after ``kill_when`` first holds), polling every 0.2 s; :class:`TimeoutError` past
    ``timeout_s``."""
    kill_at = None if kill_when or kill_after_s is None else start + kill_after_s
    while proc.poll() is None:
        if kill_at is None and kill_when is not None and kill_when():
            kill_at = time.monotonic() + (kill_after_s or 0.0)
        if kill_at is not None and time.monotonic() >= kill_at:
            return
        if time.monotonic() > start + timeout_s:
            raise TimeoutError(f"{module} still running after {timeout_s}s")
        time.sleep(0.2)


def _session_members(sid: int) -> list[int]:
    """Live (not zombie) processes of session ``sid``, read from ``/proc`` (Linux; elsewhere
    none are found and only the leader's group is killed)."""
    members = []
    for stat in glob.glob("/proc/[0-9]*/stat"):
        pid = int(stat.split("/")[2])
        try:
            if os.getsid(pid) != sid:
                continue
            with open(stat, "rb") as f:
                state = f.read().rsplit(b")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue  # gone meanwhile
        if state != b"Z":
            members.append(pid)
    return members


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    """SIGKILL every process of the job's session, not only the leader's process group
    (docs/design.md, "Fault points")."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    for _ in range(50):  # new members cannot appear: every process that could fork is killed
        members = _session_members(proc.pid)
        if not members:
            break
        for pid in members:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.1)
    proc.wait()
