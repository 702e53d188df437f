"""The ``spark-ext`` command: list the guarantee jobs, run one, or check what a crash does to it.

Usage::

    spark-ext list
    spark-ext run at_least_once --topic events --out var/data/alo   # python -m jobs.at_least_once
    spark-ext check at_most_once at_least_once --report var/recovery-report

``run`` starts ``python -m jobs.<JOB>`` with the rest of the command line (any module of
``jobs/`` works, registered or not) and returns its exit code. ``check`` runs the recovery
harness (:mod:`spark_ext.recovery`) on registered jobs, prints the table, writes the HTML
report and exits 1 when a job does not get its declared class.
"""

from __future__ import annotations

import argparse
import logging
import subprocess
import sys
from pathlib import Path
from types import ModuleType

from spark_ext.errors import SparkExtError
from spark_ext.jobrun import REPO, job_environment

log = logging.getLogger(__name__)


def _registry() -> ModuleType:
    if str(REPO) not in sys.path:
        sys.path.insert(0, str(REPO))
    from jobs import registry

    return registry


def job_module(name: str) -> str:
    """The module of job ``name``: a registered job, or any ``jobs/<name>.py``."""
    registry = _registry()
    if name in registry.JOBS:
        return str(registry.JOBS[name].module)
    if (REPO / "jobs" / f"{name}.py").exists():
        return f"jobs.{name}"
    raise registry.UnknownJobError(name, registry.names())


def cmd_list(args: argparse.Namespace) -> int:
    registry = _registry()
    rows = [("job", "module", "crash", "outputs: expected class", "what it shows")]
    for case in registry.JOBS.values():
        outputs = ", ".join(f"{o.name}: {o.expected}" for o in case.outputs)
        rows.append((case.name, case.module, case.crash.describe(), outputs, case.description))
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    for r in rows:
        print("  ".join(c.ljust(w) for c, w in zip(r[:4], widths, strict=True)) + "  " + r[4])
    return 0


def cmd_run(args: argparse.Namespace) -> int:
    module = job_module(args.job)
    cmd = [sys.executable, "-m", module, *args.job_args]
    log.info("running %s", " ".join(cmd))
    return subprocess.call(cmd, cwd=REPO, env=job_environment())


def cmd_check(args: argparse.Namespace) -> int:
    from connectors.local_kafka import LocalKafkaBroker
    from spark_ext.config import load_profile
    from spark_ext.recovery import RecoveryHarness, format_table, write_report

    registry = _registry()
    cases = [registry.get(name) for name in (args.jobs or registry.names())]
    profile = load_profile(args.profile)
    bootstrap = profile.kafka.bootstrap_servers
    if bootstrap == LocalKafkaBroker().config.bootstrap_servers:
        LocalKafkaBroker().ensure_running()
    root = profile.paths.resolved_data_root() / "recovery"
    harness = RecoveryHarness(args.workdir or root, bootstrap, profile=args.profile)
    results = []
    for case in cases:
        results.extend(harness.check(case))
    index = write_report(results, args.report or root / "report")
    print(format_table(results))
    print(f"report: {index}")
    return 0 if all(r.as_expected for r in results) else 1


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="spark-ext", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("list", help="the registered guarantee jobs and their expected classes")
    run = sub.add_parser("run", help="run a job: python -m jobs.JOB ARGS...")
    run.add_argument("job")
    run.add_argument("job_args", nargs=argparse.REMAINDER, help="arguments of the job")
    check = sub.add_parser("check", help="crash jobs, restart them, classify their outputs")
    check.add_argument("jobs", nargs="*", help="registered jobs (default: all)")
    check.add_argument("--profile", default="local", help="conf/ profile of the jobs")
    check.add_argument("--workdir", type=Path, default=None, help="runs' outputs")
    check.add_argument("--report", type=Path, default=None, help="folder of the HTML report")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    commands = {"list": cmd_list, "run": cmd_run, "check": cmd_check}
    try:
        return commands[args.command](args)
    except SparkExtError as exc:  # an unknown job, a bad profile, a job that failed
        print(f"spark-ext: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
