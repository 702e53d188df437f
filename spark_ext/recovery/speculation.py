"""The ``speculation`` cells: a straggler task on attempt 0 of one partition, judged only if a
later attempt reached its point too (docs/design.md, "Fault points": executors on two hosts)."""

from __future__ import annotations

from pathlib import Path

from spark_ext.config import load_profile
from spark_ext.jobrun import JobRun
from spark_ext.recovery.errors import FaultNotApplicable, FaultNotFired
from spark_ext.recovery.faults import FaultCell
from spark_ext.recovery.profiles import derive_profile

__all__ = ["SPECULATION_CONF", "assert_speculated", "no_speculative_copy", "speculation_profile"]

#: Spark settings of the ``speculation`` cells (why each: docs/design.md, "Fault points").
SPECULATION_CONF: dict[str, str] = {
    "spark.locality.wait": "0s",
    "spark.speculation": "true",
    "spark.speculation.interval": "100ms",
    "spark.speculation.multiplier": "1.5",
    "spark.speculation.quantile": "0.5",
    "spark.speculation.minTaskRuntime": "100ms",
}


def no_speculative_copy(master: str) -> str | None:
    """Why a speculative copy cannot run under ``master``, or ``None`` if it can."""
    if master == "local" or master.startswith("local["):
        return f"a local master ({master}) runs no speculation thread"
    if master.startswith("local-cluster"):
        return (
            f"{master}: every executor is on one host, and Spark never runs a speculative "
            "copy on a host with an attempt of the task"
        )
    return None


def speculation_profile(profile: str, dest: Path) -> str:
    """``profile`` with speculation on, written to ``dest``; :class:`FaultNotApplicable` where
    no speculative copy can run (:func:`no_speculative_copy`)."""
    why = no_speculative_copy(load_profile(profile).spark.master)
    if why:
        raise FaultNotApplicable("speculation", "speculation", f"profile {profile}: {why}")
    return str(derive_profile(profile, dest, SPECULATION_CONF))


def assert_speculated(job: str, cell: FaultCell, run: JobRun) -> None:
    """:class:`FaultNotFired` unless a later attempt reached the straggler's point too."""
    point = cell.point.name if cell.point else ""
    copies = [
        s
        for s in run.steps
        if s["point"] == point
        and (cell.batch is None or s["batch"] == cell.batch)
        and isinstance(s["attempt"], int)
        and s["attempt"] > 0
    ]
    if not copies:
        raise FaultNotFired(job, f"{cell.describe()} (no second attempt reached the point)", run)
