"""The ``spark-ext`` command: list the guarantee jobs, run one, or check what a crash does to it.

``run`` starts ``python -m jobs.<JOB>`` in the caller's working directory (relative paths mean
what they mean to the caller) and returns its exit code; ``check``, ``matrix`` and
``campaign`` exit 1 when an outcome differs from the declared one, and log each job run's own
lines (one per batch) as they come. Usage: README, "What does a crash do to my output?".
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import hashlib
import importlib.util
import logging
import subprocess
import sys
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from jobs.console import configure_logging, error_line
from jobs.startup import add_storage_flag, default_storage
from spark_ext.errors import ConfigError, SparkExtError
from spark_ext.jobrun import job_environment, run_job

if TYPE_CHECKING:
    from spark_ext.recovery import FaultClass, RecoveryCase, RecoveryHarness
    from spark_ext.storage import StorageSettings

log = logging.getLogger(__name__)


def cmd_list(args: argparse.Namespace) -> int:
    from jobs import registry
    from spark_ext.recovery import FaultClass
    from spark_ext.recovery.report import text_table

    rows = [("job", "module", "crash", "outputs: expected class", "what it shows")]
    for case in registry.JOBS.values():
        outputs = ", ".join(f"{o.name}: {o.expected}" for o in case.outputs)
        rows.append((case.name, case.module, case.crash.describe(), outputs, case.description))
    print("\n".join(text_table(rows)))
    print("\nfault points and declared outcomes per fault class:")
    for case in registry.JOBS.values():
        print(f"{case.name}:")
        for fault in FaultClass:
            cell = case.cell(fault)
            if cell is None:
                continue
            where = f"{cell.point.name} [{cell.point.side}]" if cell.point else "-"
            if cell.batch is not None:
                where += f" batch {cell.batch}"
            want = ", ".join(f"{name}: {e}" for name, e in case.expected(fault).items())
            print(f"  {fault!s:17} {where:48} {want}")
    return 0


def cmd_run(args: argparse.Namespace) -> int:
    """Run a registered job, or any module ``jobs.<JOB>``."""
    from jobs import registry  # imported on use: pyspark loads only for what needs it

    module = f"jobs.{args.job}"
    if args.job in registry.JOBS:
        module = registry.JOBS[args.job].module
    elif not args.job.isidentifier() or importlib.util.find_spec(module) is None:
        raise registry.UnknownJobError(args.job, registry.names())
    cmd = [sys.executable, "-m", module, *args.job_args]
    log.info("running %s", " ".join(cmd))
    return subprocess.call(cmd, env=job_environment())  # the caller's cwd: its relative paths


def _harness(
    args: argparse.Namespace, stack: contextlib.ExitStack | None = None
) -> tuple[RecoveryHarness, Path]:
    """The harness of ``check``/``matrix``: every path resolved against the caller's folder;
    ``--cluster isolated`` starts the cluster in ``stack`` (:func:`_on_cluster`)."""
    from connectors.kafka.local_broker import LocalKafkaBroker, private_broker
    from spark_ext.config import load_profile
    from spark_ext.recovery import RecoveryHarness

    profile = load_profile(args.profile)
    root = profile.paths.resolved_data_root() / "recovery"
    workdir = Path(args.workdir).resolve() if args.workdir else root
    report = Path(args.report).resolve() if args.report else root / "report"
    if getattr(args, "cluster", "local") == "isolated":
        assert stack is not None
        return _on_cluster(args, workdir, stack), report
    bootstrap = profile.kafka.configure_clients()
    if bootstrap == LocalKafkaBroker().config.bootstrap_servers:
        LocalKafkaBroker().ensure_running()
    out_root, settings = _out_root(args.storage or default_storage(), workdir)
    harness = RecoveryHarness(
        workdir,
        bootstrap,
        profile=args.profile,
        fault_profile=getattr(args, "fault_profile", "faults"),
        speculation_profile=getattr(args, "speculation_profile", "faults"),
        brokers=private_broker,
        out_root=out_root,
        storage=settings,
    )
    return harness, report


def _on_cluster(
    args: argparse.Namespace, workdir: Path, stack: contextlib.ExitStack
) -> RecoveryHarness:
    """The harness whose every run goes to an isolated cluster started here, one after the
    other, tables and checkpoints in the cluster's store (executors do not see the driver's
    disk); broker cells are n/a (the private brokers listen on the driver's loopback):
    docs/design.md, "Isolated hosts"."""
    from jobs.isolated import isolated_cluster
    from jobs.startup import under
    from spark_ext import storage
    from spark_ext.config import load_profile
    from spark_ext.recovery import RecoveryHarness

    if (args.storage or default_storage()) != "s3":
        raise ConfigError("--cluster isolated", "executors do not see this disk: add --storage s3")
    hosts = stack.enter_context(isolated_cluster(workdir / "cluster", args.hosts))
    settings = hosts.store.settings()
    root = load_profile("s3").paths.data_root_uri()
    out_root = under(root, "recovery", workdir.name)
    storage.check(out_root, settings)
    load_profile(hosts.profile).kafka.configure_clients()
    return RecoveryHarness(
        workdir,
        hosts.bootstrap,
        runner=functools.partial(run_job, tmp_root=hosts.shared),  # tasks log faults there
        profile=hosts.profile,
        fault_profile=hosts.profile,
        speculation_profile=hosts.profile,
        parallel=False,
        hosts=hosts,
        out_root=out_root,
        storage=settings,
    )


def _out_root(kind: str, workdir: Path) -> tuple[str, StorageSettings | None]:
    """Where ``--storage kind`` puts the runs' tables and checkpoints, and its settings: for
    ``s3``, ``<conf/s3.toml's data root>/recovery/<workdir's name>-<digest of its path>`` (two
    workdirs never share it), checked before any run."""
    from jobs.startup import storage_overrides, under
    from spark_ext import storage

    if kind == "local":
        return "", None
    sections = storage_overrides(kind)
    settings = storage.StorageSettings(**sections["storage"])
    digest = hashlib.sha256(str(workdir).encode()).hexdigest()[:8]
    out_root = under(sections["paths"]["data_root"], "recovery", f"{workdir.name}-{digest}")
    storage.check(out_root, settings)
    return out_root, settings


def _cases(args: argparse.Namespace) -> list[RecoveryCase]:
    """The jobs named on the command line (default: every registered job); the report's plots
    need the ``plot`` extra: said before any job runs."""
    from jobs import registry

    if importlib.util.find_spec("matplotlib") is None:
        raise ConfigError("matplotlib", "the report's plots need it: pip install 'spark-ext[plot]'")
    return [registry.get(name) for name in (args.jobs or registry.names())]


def cmd_check(args: argparse.Namespace) -> int:
    from spark_ext.recovery import format_table, write_report

    cases = _cases(args)
    harness, report = _harness(args)
    results = []
    for case in cases:
        results.extend(harness.check(case))
    index = write_report(results, report)
    print(format_table(results))
    print(f"report: {index}")
    return 0 if all(r.as_expected for r in results) else 1


def _faults(text: str | None) -> list[FaultClass]:
    from spark_ext.recovery import FaultClass

    if not text:
        return list(FaultClass)
    try:
        return [FaultClass(f.strip()) for f in text.split(",") if f.strip()]
    except ValueError:
        known = ", ".join(f.value for f in FaultClass)
        raise ConfigError("--faults", f"{text!r}: a comma-separated list of {known}") from None


def cmd_matrix(args: argparse.Namespace) -> int:
    from spark_ext.recovery.matrix import CellStatus, format_matrix, run_plan, write_matrix_report

    cases = _cases(args)
    faults = _faults(args.faults)
    with contextlib.ExitStack() as stack:
        harness, report = _harness(args, stack)
        cells = run_plan(harness, [(case, faults) for case in cases], args.parallel)
    index = write_matrix_report(cells, report)
    print(format_matrix(cells))
    print(f"report: {index}")
    bad = (CellStatus.UNEXPECTED, CellStatus.ERROR)
    return 1 if any(c.status in bad for c in cells) else 0


def cmd_campaign(args: argparse.Namespace) -> int:
    from jobs import registry
    from jobs.cases.campaign import CAMPAIGN_JOBS, fault_points, variant
    from spark_ext.recovery.campaign import format_campaign, run_campaign
    from spark_ext.recovery.campaign_plan import draw, pick_job

    jobs = [j.strip() for j in args.job.split(",")] if args.job else list(CAMPAIGN_JOBS)
    for name in jobs:
        registry.get(name)  # an unknown job is a typed error before anything runs
    harness, _report = _harness(args)
    harness.timeout_s = float(args.bound_s)
    plans = []
    for seed in range(args.seed, args.seed + args.runs):
        case = registry.get(pick_job(seed, jobs))
        plan = draw(seed, case.name, fault_points(case), ci=args.lane == "ci")
        plans.append((variant(case, plan.workload), plan))
    journal = harness.workdir / "campaign.jsonl"
    outcomes = run_campaign(harness, plans, args.parallel, journal, keep=args.keep)
    print(format_campaign(outcomes))
    print(f"journal: {journal}")
    return 0 if all(o.status == "pass" for o in outcomes) else 1


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="spark-ext", description=__doc__.splitlines()[0])
    parser.add_argument("--traceback", action="store_true", help="a typed error's whole trace")
    parser.add_argument("--verbose", action="store_true", help="other libraries' INFO lines")
    sub = parser.add_subparsers(dest="command", required=True)

    def command(
        name: str, run: Callable[[argparse.Namespace], int], help: str
    ) -> argparse.ArgumentParser:
        cmd = sub.add_parser(name, help=help)
        cmd.set_defaults(run=run)
        return cmd

    command("list", cmd_list, "the registered jobs, their fault points and declared outcomes")
    run = command("run", cmd_run, "run a job: python -m jobs.JOB ARGS...")
    run.add_argument("job")
    run.add_argument("job_args", nargs=argparse.REMAINDER, help="arguments of the job")
    check = command("check", cmd_check, "crash jobs, restart them, classify their outputs")
    matrix = command("matrix", cmd_matrix, "jobs x fault classes, each against its declaration")
    campaign = command("campaign", cmd_campaign, "seeded randomized runs: workloads x fault chains")
    for cmd, profile in ((check, "local"), (matrix, "test"), (campaign, "test")):
        cmd.add_argument("--profile", default=profile, help="conf/ profile of the (clean) runs")
        cmd.add_argument("--workdir", type=Path, default=None, help="runs' outputs")
        report = argparse.SUPPRESS if cmd is campaign else "folder of the HTML report"
        cmd.add_argument("--report", type=Path, default=None, help=report)
        add_storage_flag(cmd, "the runs' tables and checkpoints")
    for cmd in (check, matrix):
        cmd.add_argument("jobs", nargs="*", help="registered jobs (default: all)")
    matrix.add_argument("--faults", help="comma-separated fault classes (default: all)")
    matrix.add_argument("--fault-profile", default="faults", help="profile of the fault runs")
    matrix.add_argument(
        "--speculation-profile",
        default="faults",
        help="profile of the speculation cells (executors on two hosts)",
    )
    matrix.add_argument("--parallel", type=int, default=1, help="jobs run at the same time")
    matrix.add_argument(
        "--cluster",
        choices=["local", "isolated"],
        default="local",
        help="isolated: every run on worker hosts of their own (root; with --storage s3)",
    )
    matrix.add_argument("--hosts", type=int, default=2, help="--cluster isolated: worker hosts")
    campaign.add_argument("--seed", type=int, default=1, help="seed of the first run")
    campaign.add_argument("--runs", type=int, default=10, help="runs: seeds seed .. seed+runs-1")
    campaign.add_argument("--job", default=None, help="comma-separated jobs (default: all)")
    campaign.add_argument("--lane", choices=["full", "ci"], default="full")
    campaign.add_argument("--parallel", type=int, default=1, help="runs at the same time")
    campaign.add_argument("--bound-s", type=float, default=300.0, help="limit of each job run")
    campaign.add_argument("--keep", action="store_true", help="keep passing runs' folders")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    configure_logging(args.verbose)  # with each job run's own lines, relayed as they come
    try:
        return args.run(args)
    except SparkExtError as exc:  # an unknown job, a bad profile, a job that failed
        if args.traceback:
            traceback.print_exc()
        print(f"spark-ext: {error_line(exc)}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
