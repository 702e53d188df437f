"""Named crash points: kill the whole job process group with SIGKILL at a chosen step.

A guarantee's code calls :func:`crash_point` at each numbered step of its protocol. A crash
test starts the job with ``SPARK_EXT_CRASH_AT=<name>`` or ``<name>@<batch_id>``; when that
point is reached (in that batch) the process group of the job -- the driver's Python, its JVM
and the Python workers, started together with ``start_new_session=True`` -- gets SIGKILL.
No ``finally`` block, no shutdown hook and no flush runs: exactly what a lost driver looks like.

Points run on the driver or inside executor tasks. PySpark's worker daemon moves its Python
workers into a process group of their own (``os.setpgid(0, 0)`` in ``pyspark/daemon.py``), so
killing the caller's group from a task would spare the driver. A job started by
:func:`spark_ext.jobrun.run_job` is the leader of its own session, marked by
``SPARK_EXT_JOB_SESSION=1``; there :func:`kill_job` kills the session leader's group (the
driver's Python and its JVM) and then the caller's own group. Without the marker it kills the
caller's group only, so a crash point can never take down the shell that started a job by hand.
Without ``SPARK_EXT_CRASH_AT`` a crash point costs one dictionary lookup.
"""

from __future__ import annotations

import logging
import os
import signal
import sys

log = logging.getLogger(__name__)

CRASH_ENV = "SPARK_EXT_CRASH_AT"
#: Set by :func:`spark_ext.jobrun.run_job`: this process tree is a job session of its own.
JOB_SESSION_ENV = "SPARK_EXT_JOB_SESSION"


def crash_requested(name: str, batch_id: int | None = None) -> bool:
    """Whether ``SPARK_EXT_CRASH_AT`` asks for a crash at ``name`` (in ``batch_id``)."""
    spec = os.environ.get(CRASH_ENV)
    if not spec:
        return False
    target, _, batch = spec.partition("@")
    if target != name:
        return False
    return not batch or batch_id is None or int(batch) == batch_id


def crash_point(name: str, batch_id: int | None = None) -> None:
    """Kill the job's process group with SIGKILL if the crash test asked for ``name``."""
    if crash_requested(name, batch_id):
        kill_job(name, batch_id)


def kill_job(name: str, batch_id: int | None) -> None:
    """SIGKILL the whole job from wherever this runs: driver, executor task, or writer commit."""
    log.warning("crash point %s (batch %s): SIGKILL to the job", name, batch_id)
    sys.stderr.write(f"SPARK_EXT_CRASH {name} batch={batch_id}\n")
    sys.stderr.flush()
    session, group = os.getsid(0), os.getpgid(0)
    if os.environ.get(JOB_SESSION_ENV) == "1" and session != group:
        os.killpg(session, signal.SIGKILL)  # the session leader's group: driver and JVM
    os.killpg(group, signal.SIGKILL)
