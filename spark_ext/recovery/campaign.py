"""The randomized campaign: many seeded runs of a job, each a chain of faulted runs, checked.

Draw, check and replay: docs/design.md, "The randomized campaign". A case comes fed its drawn
workload (``variant`` in ``jobs/cases/campaign.py``)."""

from __future__ import annotations

import dataclasses
import json
import logging
import re
import shutil
import time
import traceback
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from spark_ext import storage
from spark_ext.config import KAFKA_MIN_PARTITIONS_CONF
from spark_ext.jobrun import JobRun
from spark_ext.recovery.campaign_plan import CampaignPlan, RunStep
from spark_ext.recovery.case import HarnessContext, RecoveryCase, RunSlot, under
from spark_ext.recovery.classification import RecoveryClass
from spark_ext.recovery.errors import observed_error, typed_error_names
from spark_ext.recovery.faults import FaultClass
from spark_ext.recovery.harness import RecoveryHarness
from spark_ext.recovery.profiles import derive_profile
from spark_ext.recovery.runs import compare, judge

__all__ = ["CampaignOutcome", "format_campaign", "run_campaign", "run_plan", "with_flag"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class CampaignOutcome:
    """How one campaign run ended: ``pass``, ``fail`` (a guarantee broken, a hang, an error the
    job should not raise) or ``error`` (not judged: a harness fault); ``runs``: how each ended."""

    plan: CampaignPlan
    status: str
    detail: str
    seconds: float
    runs: tuple[str, ...] = ()

    @property
    def replay(self) -> str:
        lane = " --lane ci" if self.plan.ci else ""
        return f"spark-ext campaign{lane} --seed {self.plan.seed} --runs 1 --job {self.plan.job}"

    def as_json(self) -> str:
        return json.dumps(
            {
                "seed": self.plan.seed,
                "job": self.plan.job,
                "status": self.status,
                "detail": self.detail,
                "seconds": round(self.seconds, 1),
                "runs": list(self.runs),
                "plan": self.plan.describe(),
            }
        )


def with_flag(args: Sequence[str], flag: str, value: str | None) -> list[str]:
    """``args`` with ``flag`` set to ``value`` (replaced if present), or removed (``None``)."""
    out = list(args)
    while flag in out[:-1]:
        del out[out.index(flag) : out.index(flag) + 2]
    return out if value is None else [*out, flag, value]


def _step_args(
    harness: RecoveryHarness,
    case: RecoveryCase,
    ctx: HarnessContext,
    slot: RunSlot,
    step: RunStep,
    index: int,
) -> list[str]:
    """The arguments of run ``index`` on ``slot``: a profile with its session's settings, its
    batch size."""
    cores = re.fullmatch(r"local\[(\d+)(?:,\d+)?\]", step.master)
    conf = {"spark.default.parallelism": cores.group(1) if cores else "2"}
    if step.min_partitions is not None:
        conf[KAFKA_MIN_PARTITIONS_CONF] = str(step.min_partitions)
    dest = derive_profile(
        harness.profile,
        ctx.workdir / f"run{index}.toml",
        conf,
        settings={"master": step.master, "shuffle_partitions": step.shuffle_partitions},
    )
    args = case.job_args(dataclasses.replace(ctx, profile=str(dest)), slot)
    limit = str(step.max_offsets) if step.max_offsets else None
    return with_flag(args, "--max-offsets-per-trigger", limit)


def run_plan(harness: RecoveryHarness, case: RecoveryCase, plan: CampaignPlan) -> CampaignOutcome:
    """Run ``plan`` for ``case`` (already fed its workload) and judge it."""
    start = time.monotonic()
    ctx = harness.context(case, folder=f"campaign-{plan.seed}-{plan.job}")
    case.prepare(ctx)
    slot = ctx.slot("campaign")
    errors = typed_error_names() - {"InjectedFault"}
    ended: list[str] = []

    def outcome(status: str, detail: str) -> CampaignOutcome:
        return CampaignOutcome(plan, status, detail, time.monotonic() - start, tuple(ended))

    def run(step: RunStep, name: str = "") -> tuple[JobRun, str | None]:
        """Run ``step``; note how it ended (which faults fired, the typed error it named)."""
        args = _step_args(harness, case, ctx, slot, step, len(ended))
        fault, after = step.fault, step.kill_after_s
        done = harness.runner(
            case.module, args, fault=fault, kill_after_s=after, timeout_s=harness.timeout_s
        )
        error = None if done.ok else observed_error(done.output_tail, errors)
        fired = ", ".join(f"{f['point']}:{f['kind']}" for f in done.faults) or "no fault fired"
        ended.append(f"{name}{fired} -> {'rc 0' if done.ok else error or f'rc {done.returncode}'}")
        return done, error

    with ThreadPoolExecutor(max_workers=1) as pool:
        pending = pool.submit(harness.clean_run, case, ctx)
        try:
            for step in plan.steps:  # the last one has no fault
                last, error = run(step)
        except TimeoutError as exc:
            pending.result()
            return outcome("fail", f"hang: {exc}")
        clean = pending.result()
    if not last.ok:
        tail = last.output_tail.strip().splitlines()[-3:]
        return outcome(
            "fail",
            f"the last run (no fault) failed: {error or 'untyped error'}: {' | '.join(tail)}",
        )
    broken = [
        f"{name}: {got.recovery_class.value} ({got.missing_rows} missing, {got.duplicate_rows} "
        f"duplicated, {got.differing_rows} differing of {got.expected_rows})"
        for name, (got, _) in compare(case, ctx, slot, clean.rows).items()
        if got.recovery_class is not RecoveryClass.PRECISE
    ]
    if broken:
        return outcome("fail", "; ".join(broken))
    if plan.second_query is None:
        return outcome("pass", "precise")
    # A second query on the same output and sink id, its checkpoint deleted: it must end as the
    # job declares for checkpoint-reset.
    for path in case.checkpoints(ctx, slot):
        storage.delete(path, ctx.settings)
    _, error = run(plan.second_query, "second query: ")
    compared = compare(case, ctx, slot, clean.rows)
    results = judge(case, FaultClass.CHECKPOINT_RESET, "second query", compared, {}, "", error)
    wrong = [
        f"{r.output}: {r.error or 'no error'} and {r.recovery_class}, declared {r.expected}"
        for r in results
        if not r.as_expected
    ]
    if wrong:
        return outcome("fail", f"second query on the same sink id: {'; '.join(wrong)}")
    return outcome("pass", "precise; second query refused")


def _judged(
    harness: RecoveryHarness, case: RecoveryCase, plan: CampaignPlan, keep: bool
) -> CampaignOutcome:
    start = time.monotonic()
    try:
        outcome = run_plan(harness, case, plan)
    except Exception as exc:  # a harness fault: the run is not judged, and says so
        log.warning("seed %d: %s", plan.seed, traceback.format_exc())
        outcome = CampaignOutcome(
            plan, "error", f"{type(exc).__name__}: {exc}", time.monotonic() - start
        )
    if not keep and outcome.status == "pass":
        folder = f"campaign-{plan.seed}-{plan.job}"
        shutil.rmtree(harness.workdir / folder, ignore_errors=True)
        if harness.out_root:
            storage.delete(under(harness.out_root, folder), harness.storage)
    return outcome


def run_campaign(
    harness: RecoveryHarness,
    plans: Sequence[tuple[RecoveryCase, CampaignPlan]],
    parallel: int = 1,
    journal: Path | None = None,
    keep: bool = False,
) -> list[CampaignOutcome]:
    """Run every ``(case, plan)``, ``parallel`` at a time; each outcome is appended to
    ``journal`` (JSON lines) as it ends. A failed run's folder is kept for inspection."""
    outcomes: list[CampaignOutcome] = []
    with ThreadPoolExecutor(max_workers=max(1, parallel)) as pool:
        futures = [pool.submit(_judged, harness, case, plan, keep) for case, plan in plans]
        for future in futures:
            outcome = future.result()
            outcomes.append(outcome)
            log.info(
                "campaign seed %d %s: %s (%s) in %.0fs",
                outcome.plan.seed,
                outcome.plan.job,
                outcome.status,
                outcome.detail,
                outcome.seconds,
            )
            if journal is not None:
                journal.parent.mkdir(parents=True, exist_ok=True)
                with journal.open("a") as f:
                    f.write(outcome.as_json() + "\n")
    return outcomes


def format_campaign(outcomes: Sequence[CampaignOutcome]) -> str:
    """Per job: runs, passes, failures, errors; then every failing seed with its replay."""
    jobs = sorted({o.plan.job for o in outcomes})
    groups = [(job, [o for o in outcomes if o.plan.job == job]) for job in jobs]
    lines = [f"{'job':32} {'runs':>5} {'pass':>5} {'fail':>5} {'error':>5}"]
    for name, mine in [*groups, ("all", list(outcomes))]:
        counts = "".join(
            f" {sum(o.status == s for o in mine):5}" for s in ("pass", "fail", "error")
        )
        lines.append(f"{name:32} {len(mine):5}{counts}")
    for o in outcomes:
        if o.status != "pass":
            lines.append(f"{o.status.upper()} seed {o.plan.seed} {o.plan.job}: {o.detail}")
            lines.append(f"  replay: {o.replay}")
            lines.extend(f"  {line}" for line in o.plan.describe().splitlines()[1:])
            lines.extend(f"  ended: {r}" for r in o.runs)
    return "\n".join(lines)
