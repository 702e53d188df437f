"""Errors of the recovery harness (a cell that cannot be judged is one of these, never a class:
classifying it could report ``precise`` over two empty outputs), and the typed error a failed
run names."""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import TYPE_CHECKING

from spark_ext.errors import SparkExtError

if TYPE_CHECKING:
    from spark_ext.jobrun import JobRun

__all__ = [
    "ERROR_MODULES",
    "EmptyCleanOutput",
    "FaultNotApplicable",
    "FaultNotFired",
    "JobRunFailed",
    "RecoveryError",
    "RetentionNotApplied",
    "cause_lines",
    "observed_error",
    "typed_error_names",
]


_CAUSE = re.compile(r"\b\w*(?:Error|Exception|Fault|Agent)\b[:(]")


def cause_lines(output: str, limit: int = 8) -> str:
    """The lines of a failed run's output that name an exception (last ``limit``), so a cause
    is not lost behind the query plan Spark prints after it."""
    lines = [
        line.strip()
        for line in output.splitlines()
        if _CAUSE.search(line) and not line.lstrip().startswith(("+-", ":", "at "))
    ]
    return "\n".join(list(dict.fromkeys(lines))[-limit:])


def _ending(run: JobRun) -> str:
    """The named cause and the tail of a failed run's output."""
    return f"cause: {cause_lines(run.output_tail) or 'none named'}\n{run.output_tail[-1500:]}"


class RecoveryError(SparkExtError, RuntimeError):
    """Base class of the harness's errors: the run cannot be classified."""


class JobRunFailed(RecoveryError):
    """A clean or restarted run of a job did not exit 0; ``run`` holds its output tail."""

    def __init__(self, job: str, phase: str, run: JobRun) -> None:
        self.job, self.phase, self.run = job, phase, run
        super().__init__(
            f"{job}: {phase} run exited with {run.returncode} after {run.seconds:.0f}s\n"
            + _ending(run)
        )


class FaultNotFired(RecoveryError):
    """The fault asked for never fired (read from the run's fault log, never from how the
    process ended)."""

    def __init__(self, job: str, fault: str, run: JobRun) -> None:
        self.job, self.fault, self.run = job, fault, run
        fired = ", ".join(f"{f['point']}:{f['kind']}@{f['batch']}" for f in run.faults) or "none"
        super().__init__(
            f"{job}: fault {fault} never fired (fired: {fired}); run exited with "
            f"{run.returncode}\n" + _ending(run)
        )


class EmptyCleanOutput(RecoveryError):
    """The clean run wrote nothing to an output: there is nothing to compare a fault run with."""

    def __init__(self, job: str, output: str, where: str) -> None:
        self.job, self.output, self.where = job, output, where
        super().__init__(
            f"{job}: the clean run left no rows in {output!r} ({where}); a comparison with an "
            "empty output would prove nothing"
        )


class FaultNotApplicable(RecoveryError):
    """The job declares no fault point of the kind this fault class needs."""

    def __init__(self, job: str, fault: str, why: str) -> None:
        self.job, self.fault = job, fault
        super().__init__(f"{job}: {fault} cannot be injected: {why}")


class RetentionNotApplied(RecoveryError):
    """A retention fault removed nothing (no record to trim, no commit file before the
    checkpoint): the restart would face no fault, so the cell proves nothing."""

    def __init__(self, target: str, why: str) -> None:
        self.target = target
        super().__init__(f"retention on {target} did nothing: {why}")


#: Modules whose typed errors a failed run may name.
ERROR_MODULES = (
    "spark_ext.crash",
    "spark_ext.sinks.errors",
    "spark_ext.tracker.errors",
    "spark_ext.dedup.errors",
    "spark_ext.recovery.errors",
)


def typed_error_names() -> set[str]:
    """Class names of every :class:`~spark_ext.errors.SparkExtError` subclass (modules imported)."""
    import importlib

    for module in ERROR_MODULES:
        importlib.import_module(module)  # a module that fails to import is a loud failure
    names: set[str] = set()
    todo: list[type] = [SparkExtError]
    while todo:
        cls = todo.pop()
        names.add(cls.__name__)
        todo.extend(cls.__subclasses__())
    return names


_ERROR_NAME = re.compile(r"\b([A-Z][A-Za-z0-9]+)\b")


def observed_error(output: str, known: Iterable[str]) -> str | None:
    """The last of the ``known`` error class names in a failed run's output (``None``: none;
    Spark's ``StreamingQueryException`` message holds the Python traceback)."""
    names = set(known)
    found = [m.group(1) for m in _ERROR_NAME.finditer(output) if m.group(1) in names]
    return found[-1] if found else None
