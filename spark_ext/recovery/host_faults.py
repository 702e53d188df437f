"""The host faults of the matrix on isolated hosts (:mod:`spark_ext.recovery.network`): the host
whose task reached the cell's point is lost, or cut from the broker and the store and healed,
while the task holds there, or its link is slowed to the end of the run (docs/design.md,
"Isolated hosts")."""

from __future__ import annotations

import dataclasses
import logging
import time
import uuid
from pathlib import Path
from typing import Protocol

from spark_ext import storage
from spark_ext.recovery.case import HarnessContext, RecoveryCase, RecoveryResult, RunSlot
from spark_ext.recovery.errors import RecoveryError
from spark_ext.recovery.faults import HOST_FAULTS, FaultCell, FaultClass
from spark_ext.recovery.network import cut, heal, host_of, kill_host, slow, unslow
from spark_ext.recovery.runs import CleanRun, JobRuns

__all__ = [
    "HOST_FAULTS",
    "IsolatedHosts",
    "LivenessExceeded",
    "first_commit_after",
    "run_host_cell",
]

log = logging.getLogger(__name__)


class IsolatedHosts(Protocol):
    """A running isolated cluster, as the harness needs it."""

    @property
    def profile(self) -> str:
        """The profile whose runs execute on the cluster (its broker and store on the bridge)."""
        ...

    @property
    def shared(self) -> Path:
        """The folder every host sees (the fault logs go there; never job data)."""
        ...

    def restart(self, host: str) -> None:
        """Start the lost ``host``'s worker again (it is ALIVE when this returns)."""
        ...


class LivenessExceeded(RecoveryError):
    """No batch committed within the job's declared bound after the heal (or host loss), or
    (``slow-link``) the run did not end within it after the link was slowed."""

    def __init__(
        self,
        job: str,
        fault: str,
        seconds: float | None,
        bound_s: float,
        since: str = "first commit after the heal",
    ) -> None:
        took = "no batch committed after it" if seconds is None else f"{seconds:.1f}s"
        super().__init__(f"{job} under {fault}: {since}: {took} > {bound_s:g}s")


def first_commit_after(
    case: RecoveryCase, ctx: HarnessContext, slot: RunSlot, at: float
) -> float | None:
    """Seconds from ``at`` (wall clock) to the first entry of ``slot``'s commit logs written
    after it (``None``: none was)."""
    import pyarrow.fs as pafs

    times = []
    for checkpoint in case.checkpoints(ctx, slot):
        commits = storage.Location.parse(checkpoint).join("commits")
        fs, path = storage.filesystem(commits, ctx.settings)
        entries = fs.get_file_info(pafs.FileSelector(path, allow_not_found=True))
        times += [e.mtime.timestamp() for e in entries if e.base_name.isdigit() and e.mtime]
    later = [t - at for t in times if t >= at]
    return min(later) if later else None


def run_host_cell(
    runs: JobRuns, case: RecoveryCase, cell: FaultCell, hosts: IsolatedHosts, clean: CleanRun
) -> list[RecoveryResult]:
    """Run ``case`` on the cluster under ``cell`` (a host fault), restart it unless it finished,
    classify against ``clean``; :class:`LivenessExceeded` past the cell's bound. A slowed link
    is restored when the run ends, however it ends (the restart runs on a healthy link)."""
    ctx = dataclasses.replace(clean.ctx, profile=hosts.profile)
    slot = ctx.slot(str(cell.fault))
    fault_log = hosts.shared / f"{case.name}-{cell.fault}-{uuid.uuid4().hex[:8]}.jsonl"
    host: str | None = None
    at: float | None = None  # wall clock, comparable with file times

    def act(fired: list[dict[str, object]]) -> bool:
        """Act on the host of the first task that reached the point; ``True`` once done."""
        nonlocal host, at
        tasks = [e for e in fired if e["side"] == "executor"]
        if not tasks:
            return False
        host = host_of(int(str(tasks[0]["pid"])))
        if host is None:
            raise RecoveryError(
                f"{cell.describe()}: the task (pid {tasks[0]['pid']}) is on no host"
            )
        if cell.fault is FaultClass.HOST_LOSS:
            kill_host(host)
        elif cell.fault is FaultClass.SLOW_LINK:
            slow(host)
        else:
            cut(host)
            try:
                time.sleep(cell.seconds)
            finally:
                heal(host)
        at = time.time()
        return True

    log.info("%s: %s on the isolated cluster", case.name, cell.describe())
    try:
        faulted = runs.run_acting(case, cell, case.job_args(ctx, slot), fault_log, act)
    finally:
        if cell.fault is FaultClass.SLOW_LINK and host is not None:
            unslow(host)
    ended = time.time()
    assert at is not None  # it acted
    try:
        described = f"{cell.describe()} on {host}"
        results = runs.restart_and_compare(case, ctx, slot, clean, faulted, cell.fault, described)
    finally:
        if cell.fault is FaultClass.HOST_LOSS and host is not None:
            hosts.restart(host)
    since = "first commit after the heal"
    liveness = first_commit_after(case, ctx, slot, at)
    if cell.fault is FaultClass.SLOW_LINK:
        since, liveness = "the run's end after the link slowed", ended - at
    log.info("%s under %s: %s: %ss", case.name, cell.fault, since, liveness)
    if liveness is None or liveness > cell.bound_s:
        raise LivenessExceeded(case.name, str(cell.fault), liveness, cell.bound_s, since)
    return [
        dataclasses.replace(r, run_seconds={**r.run_seconds, "liveness": liveness}) for r in results
    ]
