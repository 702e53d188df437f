"""Run a guarantee job clean and under one fault, restart it, and classify what the fault did.

1. **clean**: the job to its end, no fault (``O_e``, not empty).
2. **fault**: the cell's fault in a slot of its own, seen firing in the fault log.
3. **restart**: an unfinished run restarted on its checkpoint and output; ``O_f + O'`` is
   classified against ``O_e`` (docs/design.md, "Recovery classes").

Paths are the caller's, where the jobs run too; the runs' outputs may be on object storage
(``out_root``). Usage: README, "What does a crash do to my output?".
"""

from __future__ import annotations

import dataclasses
import logging
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from spark_ext import storage
from spark_ext.recovery.broker_faults import BrokerFactory, run_broker_cell
from spark_ext.recovery.case import RecoveryCase, RecoveryResult
from spark_ext.recovery.disorder import run_disorder_cell
from spark_ext.recovery.errors import FaultNotApplicable, FaultNotFired, RecoveryError
from spark_ext.recovery.faults import BROKER_FAULTS, RETENTION_FAULTS, FaultCell, FaultClass
from spark_ext.recovery.host_faults import HOST_FAULTS, IsolatedHosts, run_host_cell
from spark_ext.recovery.profiles import derive_profile, resolve_profile
from spark_ext.recovery.retention import run_retention_cell
from spark_ext.recovery.runs import CleanRun, JobRuns, compare, judge, typed_error
from spark_ext.recovery.speculation import SPECULATION_CONF, assert_speculated, speculation_profile
from spark_ext.recovery.store_faults import require_s3, run_store_cell

__all__ = ["RecoveryHarness", "forget_last_commit"]

log = logging.getLogger(__name__)


@dataclass(eq=False)
class RecoveryHarness(JobRuns):
    """Run cases clean and under faults, restart them, and classify what each fault did.

    ``workdir``: a subfolder per case, emptied when it is checked. ``bootstrap``: never paused
    or killed; broker cells run on a broker ``brokers`` makes (none: those cells are n/a).
    Profiles (``conf/`` names or paths): ``profile`` for clean runs and kills,
    ``fault_profile`` for other faults (tasks retried), ``speculation_profile`` for
    speculation cells. ``hosts``: an isolated cluster the host faults run on (none: those
    cells are n/a). ``runner`` runs one job process (``clean_runner``: the clean runs);
    ``parallel`` runs the clean run beside the killed one. ``out_root``: where the runs'
    tables and checkpoints go (default: ``workdir``; an ``s3a://`` prefix runs the jobs with
    ``--storage s3``), reached with ``storage``.
    """

    parallel: bool = True
    hosts: IsolatedHosts | None = None
    brokers: BrokerFactory | None = None
    speculation_profile: str = "faults"

    def __post_init__(self) -> None:
        super().__post_init__()
        self.speculation_profile = resolve_profile(self.speculation_profile)

    def check(self, case: RecoveryCase) -> list[RecoveryResult]:
        """Run ``case`` clean, then killed at its crash plan and restarted; classify each output."""
        ctx = self.context(case)
        case.prepare(ctx)
        slot = ctx.slot("crashed")
        log.info("%s: clean run%s", case.name, " (alongside the killed run)" * self.parallel)
        with ThreadPoolExecutor(max_workers=1) as pool:
            pending: Future[CleanRun] | None = None
            if self.parallel:
                pending = pool.submit(self.clean_run, case, ctx)
            else:
                clean = self.clean_run(case, ctx)
            log.info("%s: run killed at %s", case.name, case.crash.describe())
            run = self.runner(
                case.module,
                case.job_args(ctx, slot),
                fault=case.crash.fault,
                kill_after_s=case.crash.kill_after_s,
                timeout_s=self.timeout_s,
            )
            if pending is not None:
                clean = pending.result()
        described, point = case.crash.describe(), case.crash.point
        if not (run.fired(point.name, "kill") if point else run.killed):
            raise FaultNotFired(case.name, described, run)
        if point is None:  # a random moment: say where it landed
            described += f" (after {run.last_step or 'no step'})"
        return self.restart_and_compare(case, ctx, slot, clean, run, FaultClass.KILL, described)

    def run_cell(
        self, case: RecoveryCase, fault: FaultClass, clean: CleanRun | None = None
    ) -> list[RecoveryResult]:
        """Run ``case`` under ``fault`` as the case declares it and classify each output.

        ``clean`` (a clean run of the case, whose context is reused) is run first if not given.
        ``checkpoint-reset`` runs on the clean slot itself: run it last.
        """
        cell = case.cell(fault)
        if cell is None:
            raise FaultNotApplicable(case.name, str(fault), "the job declares no point for it")
        if fault in BROKER_FAULTS:
            if self.brokers is None:
                raise FaultNotApplicable(
                    case.name, str(fault), "the harness was given no broker factory (brokers=)"
                )
            return run_broker_cell(self, case, cell, self.brokers)
        if fault is FaultClass.DISORDER:
            return run_disorder_cell(self, case, cell)
        if fault in HOST_FAULTS and self.hosts is None:
            raise FaultNotApplicable(case.name, str(fault), "no isolated cluster (hosts=)")
        if fault is FaultClass.STORE_ERRORS:
            require_s3(self, case, cell)
        if clean is None:
            ctx = self.context(case)
            case.prepare(ctx)
            clean = self.clean_run(case, ctx)
        if cell.point is None:  # checkpoint-reset, or a job that refuses speculation
            return self._run_once(case, cell, clean)
        if fault in HOST_FAULTS and self.hosts is not None:
            return run_host_cell(self, case, cell, self.hosts, clean)
        if fault is FaultClass.STORE_ERRORS:
            return run_store_cell(self, case, cell, clean)
        if fault in RETENTION_FAULTS:
            return run_retention_cell(self, case, cell, clean)
        profile = self.fault_profile
        if fault is FaultClass.SPECULATION:
            dest = clean.ctx.workdir / "speculation.toml"
            profile = speculation_profile(self.speculation_profile, dest)
        ctx = dataclasses.replace(clean.ctx, profile=profile)
        run = self.fault_run(case, cell, ctx)
        if fault is FaultClass.SPECULATION:
            assert_speculated(case.name, cell, run)
        slot = ctx.slot(str(fault))
        return self.restart_and_compare(case, ctx, slot, clean, run, fault, cell.describe())

    def _run_once(
        self, case: RecoveryCase, cell: FaultCell, clean: CleanRun
    ) -> list[RecoveryResult]:
        """Run the job once: ``checkpoint-reset`` on the clean slot, its checkpoints deleted and
        its output kept; a job refusing speculation on a fresh slot, with speculation on.
        Classify each output against what the slot held and name the typed error the run
        stopped with, if any."""
        ctx, slot, reference = clean.ctx, clean.slot, clean.rows
        if cell.fault is FaultClass.CHECKPOINT_RESET:
            checkpoints = case.checkpoints(ctx, slot)
            if not checkpoints:
                raise FaultNotApplicable(
                    case.name, str(cell.fault), f"no checkpoint under {slot.out}"
                )
            for path in checkpoints:
                log.info("%s: checkpoint reset: deleting %s, keeping the output", case.name, path)
                storage.delete(path, ctx.settings)
        else:
            dest = ctx.workdir / "speculation.toml"
            profile = derive_profile(self.speculation_profile, dest, SPECULATION_CONF)
            ctx = dataclasses.replace(ctx, profile=str(profile))
            slot = ctx.slot(str(cell.fault))
            storage.delete(slot.out, ctx.settings)
            log.info("%s: started with spark.speculation on; must refuse", case.name)
            reference = {o.name: [] for o in case.outputs}
        run = self.runner(case.module, case.job_args(ctx, slot), timeout_s=self.timeout_s)
        error = typed_error(case, str(cell.fault), run)
        compared = compare(case, ctx, slot, reference, {k: len(v) for k, v in reference.items()})
        seconds = {"clean": clean.seconds, "fault": run.seconds}
        note = "stopped with a typed error" if error else "ran to its end"
        return judge(case, cell.fault, cell.describe(), compared, seconds, note, error)


def forget_last_commit(
    checkpoint: str | Path, settings: storage.StorageSettings | None = None
) -> int:
    """Delete the newest entry of a stopped query's commit log (the in-process stand-in for a
    SIGKILL between the sink's write and Spark's commit); returns its batch id."""
    commits = storage.Location.parse(checkpoint).join("commits")
    ids = sorted(int(n) for n in storage.list_prefix(commits, settings) if n.isdigit())
    if not ids:
        raise RecoveryError(f"{commits} has no committed batch")
    storage.delete(commits.join(str(ids[-1])), settings)
    storage.delete(commits.join(f".{ids[-1]}.crc"), settings)
    log.info("forgot the commit of batch %d in %s", ids[-1], checkpoint)
    return ids[-1]
