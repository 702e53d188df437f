"""The ``store-errors`` fault of the matrix: the job's object store reached through a
:class:`~spark_ext.recovery.store_proxy.StoreFaultProxy`, which answers a share of the requests
with S3's 503/500 for the cell's seconds once its point fires (docs/design.md, "Object
storage": store errors)."""

from __future__ import annotations

import dataclasses
import logging
import time
from dataclasses import asdict

from spark_ext import storage
from spark_ext.recovery.case import RecoveryCase, RecoveryResult
from spark_ext.recovery.errors import FaultNotApplicable
from spark_ext.recovery.faults import FaultCell
from spark_ext.recovery.host_faults import first_commit_after, with_liveness
from spark_ext.recovery.profiles import derive_profile
from spark_ext.recovery.runs import CleanRun, JobRuns
from spark_ext.recovery.store_proxy import StoreFaultProxy
from spark_ext.storage import StorageSettings

__all__ = ["STORE_ERROR_SHARE", "require_s3", "run_store_cell"]

log = logging.getLogger(__name__)

#: The share of requests answered with an error while the fault is on (every second one).
STORE_ERROR_SHARE = 0.5


def require_s3(runs: JobRuns, case: RecoveryCase, cell: FaultCell) -> StorageSettings:
    """The settings of the harness's S3 endpoint; :class:`FaultNotApplicable` when its runs
    write to no S3 endpoint of its own (no proxy can stand in front of AWS's)."""
    on_s3 = runs.out_root and storage.Location.parse(runs.out_root).is_s3
    if not on_s3 or runs.storage is None or not runs.storage.endpoint:
        raise FaultNotApplicable(case.name, str(cell.fault), "the runs write to no S3 endpoint")
    return runs.storage


def run_store_cell(
    runs: JobRuns, case: RecoveryCase, cell: FaultCell, clean: CleanRun
) -> list[RecoveryResult]:
    """Run ``case`` with its store behind a fault proxy, failing :data:`STORE_ERROR_SHARE` of
    the requests for ``cell.seconds`` from the moment its point fires; restart it unless it
    finished, classify against ``clean``; :class:`LivenessExceeded` past the cell's bound."""
    ctx, settings = clean.ctx, require_s3(runs, case, cell)
    with StoreFaultProxy(settings.endpoint) as proxy:
        # The run's own [storage], kept under its --storage s3: the proxy.
        section = {k: v for k, v in asdict(settings).items() if v}
        dest = ctx.workdir / "store-errors.toml"
        profile = derive_profile(
            runs.fault_profile, dest, sections={"storage": {**section, "endpoint": proxy.endpoint}}
        )
        faulted_ctx = dataclasses.replace(ctx, profile=str(profile))
        slot = faulted_ctx.slot(str(cell.fault))
        storage.delete(slot.out, ctx.settings)
        args = case.job_args(faulted_ctx, slot)
        healed: float | None = None  # wall clock, comparable with file times

        def act(fired: list[dict[str, object]]) -> bool:
            nonlocal healed
            if not fired:
                return False
            proxy.fail(cell.seconds, STORE_ERROR_SHARE)
            healed = time.time() + cell.seconds
            return True

        fault_log = ctx.workdir / f"{cell.fault}-faults.jsonl"
        faulted = runs.run_acting(case, cell, args, fault_log, act)
        log.info(
            "%s: store errors answered %s, forwarded %d", case.name, proxy.failed, proxy.forwarded
        )
    assert healed is not None  # it acted
    described = f"{cell.describe()} ({STORE_ERROR_SHARE:g} of requests: {_counts(proxy)})"
    # The restart reaches the store directly (its --storage s3).
    ctx = dataclasses.replace(ctx, profile=runs.fault_profile)
    results = runs.restart_and_compare(case, ctx, slot, clean, faulted, cell.fault, described)
    liveness = first_commit_after(case, ctx, slot, healed)
    if liveness is None and faulted.ok:
        liveness = 0.0  # it committed every batch before the heal and ended on its own
    return with_liveness(case, cell, results, liveness)


def _counts(proxy: StoreFaultProxy) -> str:
    """``<n> failed (503: a, 500: b) of <m>``."""
    failed = sum(proxy.failed.values())
    codes = ", ".join(f"{code}: {n}" for code, n in sorted(proxy.failed.items(), reverse=True))
    return f"{failed} failed ({codes}) of {failed + proxy.forwarded}"
