"""Named crash points: kill the whole job process group with SIGKILL at a chosen step.

A guarantee's code calls :func:`crash_point` at each numbered step of its protocol. A crash
test starts the job with ``SPARK_EXT_CRASH_AT=<name>`` or ``<name>@<batch_id>``; when that
point is reached (in that batch) the process group of the job -- the driver's Python, its JVM
and the Python workers, started together with ``start_new_session=True`` -- gets SIGKILL.
No ``finally`` block, no shutdown hook and no flush runs: exactly what a lost driver looks like.

Points run on the driver or inside executor tasks; in local mode both are in the job's
process group, so either kills the driver. Without the variable a crash point costs one
dictionary lookup.
"""

from __future__ import annotations

import logging
import os
import signal
import sys

log = logging.getLogger(__name__)

CRASH_ENV = "SPARK_EXT_CRASH_AT"


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
    if not crash_requested(name, batch_id):
        return
    log.warning("crash point %s (batch %s): SIGKILL to the process group", name, batch_id)
    sys.stderr.write(f"SPARK_EXT_CRASH {name} batch={batch_id}\n")
    sys.stderr.flush()
    os.killpg(os.getpgid(0), signal.SIGKILL)
