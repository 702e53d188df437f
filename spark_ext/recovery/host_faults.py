"""The host faults of the matrix on isolated hosts (:mod:`spark_ext.recovery.network`): the host
whose task reached the cell's point is lost, or cut from the broker and the store and healed,
while the task holds there, or its link is slowed to the end of the run; or the driver, run
on a host of its own, is cut at a driver point (docs/design.md, "Isolated hosts")."""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import time
import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, Protocol

from spark_ext import storage
from spark_ext.crash import REACHED, fault_log_entries
from spark_ext.jobrun import JobRun
from spark_ext.recovery.case import HarnessContext, RecoveryCase, RecoveryResult, RunSlot
from spark_ext.recovery.errors import RecoveryError
from spark_ext.recovery.faults import HOST_FAULTS, HOST_HOLD_S, FaultCell, FaultClass
from spark_ext.recovery.network import (
    DRIVER_HOST,
    DRIVER_HOST_ADDRESS,
    add_host,
    cut,
    heal,
    host_of,
    kill_host,
    remove_host,
    slow,
    unslow,
)
from spark_ext.recovery.profiles import derive_profile
from spark_ext.recovery.runs import CleanRun, JobRuns, Runner

__all__ = [
    "HOST_FAULTS",
    "IsolatedHosts",
    "LivenessExceeded",
    "first_commit_after",
    "on_driver_host",
    "run_host_cell",
    "with_liveness",
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


def on_driver_host(runner: Runner) -> Runner:
    """``runner`` running its job's driver on :data:`DRIVER_HOST` (same process, pid, session:
    :mod:`spark_ext.recovery.in_host`)."""

    def run(module: str, args: Sequence[str], **kwargs: Any) -> JobRun:
        traced = {"trace": True, **kwargs}  # the steps after the point: did it meet the cut?
        return runner("spark_ext.recovery.in_host", [DRIVER_HOST, module, *args], **traced)

    return run


def run_host_cell(
    runs: JobRuns, case: RecoveryCase, cell: FaultCell, hosts: IsolatedHosts, clean: CleanRun
) -> list[RecoveryResult]:
    """Run ``case`` on the cluster under ``cell`` (a host fault), restart it unless it finished,
    classify against ``clean``; :class:`LivenessExceeded` past the cell's bound. A slowed link
    is restored when the run ends, however it ends (the restart runs on a healthy link)."""
    if cell.fault is FaultClass.DRIVER_PARTITION:
        with on_a_driver_host(runs, clean.ctx, hosts) as driver:
            return _run_host_cell(runs, case, cell, hosts, clean, driver)
    return _run_host_cell(runs, case, cell, hosts, clean)


@contextlib.contextmanager
def on_a_driver_host(
    runs: JobRuns, ctx: HarnessContext, hosts: IsolatedHosts
) -> Iterator[tuple[JobRuns, HarnessContext]]:
    """:data:`DRIVER_HOST` made for the scope, with ``runs`` and ``ctx`` whose jobs run their
    driver there (the cluster's profile with the host's address as the driver's)."""
    driver = {
        "spark.driver.host": DRIVER_HOST_ADDRESS,
        "spark.driver.bindAddress": DRIVER_HOST_ADDRESS,
    }
    profile = derive_profile(hosts.profile, ctx.workdir / "driver-host.toml", spark_conf=driver)
    add_host(DRIVER_HOST, DRIVER_HOST_ADDRESS)
    try:
        driver_runs = dataclasses.replace(runs, runner=on_driver_host(runs.runner))
        yield driver_runs, dataclasses.replace(ctx, profile=str(profile))
    finally:
        remove_host(DRIVER_HOST)


def _run_host_cell(
    runs: JobRuns,
    case: RecoveryCase,
    cell: FaultCell,
    hosts: IsolatedHosts,
    clean: CleanRun,
    driver: tuple[JobRuns, HarnessContext] | None = None,
) -> list[RecoveryResult]:
    """:func:`run_host_cell`; the faulted run by ``driver``'s runs and context if given (the
    restart always by ``runs`` with the cluster's profile)."""
    ctx = dataclasses.replace(clean.ctx, profile=hosts.profile)
    slot = ctx.slot(str(cell.fault))
    fault_runs, fault_ctx = driver or (runs, ctx)
    fault_log = hosts.shared / f"{case.name}-{cell.fault}-{uuid.uuid4().hex[:8]}.jsonl"
    host: str | None = None
    at: float | None = None  # wall clock, comparable with file times
    polled = time.monotonic()  # the last look at the log that found nothing to act on

    def act(fired: list[dict[str, object]]) -> bool:
        """Act on the host of the first task (or the driver) that reached the point; ``True``
        once done."""
        nonlocal host, at, polled
        if cell.fault is FaultClass.DRIVER_PARTITION:
            return cut_driver(fired)
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

    def cut_driver(fired: list[dict[str, object]]) -> bool:
        """Cut the driver once it reached the point, hold, heal; ``True`` once done. The
        driver must neither leave the point before the cut nor pass a step after it (its
        commit) before the heal."""
        nonlocal host, at, polled
        faults = [i for i, e in enumerate(fired) if e["kind"] != REACHED and e["side"] == "driver"]
        if not faults:
            polled = time.monotonic()
            return False
        host = DRIVER_HOST
        cut(host)
        late = time.monotonic() - polled
        try:
            if late >= HOST_HOLD_S:
                raise RecoveryError(f"{cell.describe()}: cut {late:.1f}s after the point")
            time.sleep(cell.seconds)
            passed = [
                str(e["point"])
                for e in fault_log_entries(fault_log)[faults[0] + 1 :]
                if e["side"] == "driver" and e["batch"] == cell.batch
            ]
            if passed:
                raise RecoveryError(f"{cell.describe()}: {passed} reached while cut")
        finally:
            heal(host)
        at = time.time()
        return True

    log.info("%s: %s on the isolated cluster", case.name, cell.describe())
    try:
        args = case.job_args(fault_ctx, slot)
        faulted = fault_runs.run_acting(case, cell, args, fault_log, act)
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
    return with_liveness(case, cell, results, liveness, since)


def with_liveness(
    case: RecoveryCase,
    cell: FaultCell,
    results: list[RecoveryResult],
    liveness: float | None,
    since: str = "first commit after the heal",
) -> list[RecoveryResult]:
    """``results`` with ``liveness`` in their ``run_seconds``; :class:`LivenessExceeded` if it
    is ``None`` or past ``cell.bound_s``."""
    log.info("%s under %s: %s: %ss", case.name, cell.fault, since, liveness)
    if liveness is None or liveness > cell.bound_s:
        raise LivenessExceeded(case.name, str(cell.fault), liveness, cell.bound_s, since)
    return [
        dataclasses.replace(r, run_seconds={**r.run_seconds, "liveness": liveness}) for r in results
    ]
