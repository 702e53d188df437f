"""A guarantee job as the harness sees it: its input, its runs' arguments, outputs and faults
(cases: ``jobs/cases/``; Kafka outputs are read there, Delta ones by :func:`read_delta_rows`)."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from spark_ext import storage
from spark_ext.crash import FaultPoint, FaultSpec, lookup
from spark_ext.recovery.classification import Comparison, OutputSpec, RecoveryClass
from spark_ext.recovery.faults import (
    Expectation,
    ExpectedError,
    FaultCell,
    FaultClass,
)

__all__ = [
    "CrashPlan",
    "ExpectedOutput",
    "HarnessContext",
    "RecoveryCase",
    "RecoveryResult",
    "RunSlot",
    "delta_table",
    "read_delta_rows",
    "under",
]


@dataclass(frozen=True)
class CrashPlan:
    """Where the killed run dies: a fault spec (``CrashPlan.at(AFTER_WRITE, 1)``), or a delay."""

    fault: str | None = None
    kill_after_s: float | None = None

    def __post_init__(self) -> None:
        if (self.fault is None) == (self.kill_after_s is None):
            raise ValueError("CrashPlan needs exactly one of fault and kill_after_s")

    @classmethod
    def at(cls, point: FaultPoint, batch: int | None = None) -> CrashPlan:
        """A kill at the declared ``point`` (in ``batch``)."""
        return cls(fault=str(FaultSpec(point.name, batch)))

    @property
    def point(self) -> FaultPoint | None:
        """The declared point of the kill (``None`` for a kill after a delay)."""
        return lookup(FaultSpec.parse(self.fault).point) if self.fault else None

    @property
    def batch(self) -> int | None:
        return FaultSpec.parse(self.fault).batch if self.fault else None

    def describe(self) -> str:
        return self.fault if self.fault else f"SIGKILL after {self.kill_after_s:g}s"


@dataclass(frozen=True)
class HarnessContext:
    """What a case needs to prepare its input and build its runs' arguments: a local
    ``workdir`` (profiles, logs), and ``out_root`` (default: ``workdir``), where the runs'
    tables and checkpoints go, reached with ``settings`` (docs/design.md, "Object storage")."""

    workdir: Path
    bootstrap: str
    profile: str
    tag: str
    out_root: str = ""
    settings: storage.StorageSettings | None = None

    @property
    def root(self) -> str:
        """Where the runs' outputs go: :attr:`out_root`, else :attr:`workdir`."""
        return self.out_root or str(self.workdir)

    @property
    def storage(self) -> str:
        """The jobs' ``--storage``: ``s3`` when the outputs are on object storage."""
        return "s3" if storage.Location.parse(self.root).is_s3 else "local"

    def topic(self, name: str) -> str:
        """A topic name unique to this check (``name`` distinguishes input from outputs)."""
        return f"{self.tag}-{name}"

    def slot(self, name: str) -> RunSlot:
        """The output location ``name`` under :attr:`root`."""
        return RunSlot(name, under(self.root, name))


def under(root: str, *names: str) -> str:
    """The location ``names`` below ``root`` as Spark names it (a path or ``s3a://`` URI)."""
    return storage.spark_uri(storage.Location.parse(root).join(*names))


@dataclass(frozen=True)
class RunSlot:
    """One output location: ``clean`` (``O_e``) or a fault's (``O_f + O'``); ``out`` is a
    local path or an ``s3a://`` URI."""

    name: str
    out: str

    def at(self, *names: str) -> str:
        """The location ``names`` below :attr:`out`."""
        return under(self.out, *names)


@dataclass(frozen=True)
class ExpectedOutput:
    """One output of a job, how it is compared, and the class a ``kill`` should give it."""

    name: str
    spec: OutputSpec
    expected: RecoveryClass


class RecoveryCase(ABC):
    """A guarantee job as the harness sees it: how to feed it, run it and read its outputs."""

    name: str  # short name for the CLI and the report (``at_most_once``)
    module: str  # run as ``python -m module``
    crash: CrashPlan  # the ``kill`` fault, unless ``cells`` has one
    outputs: tuple[ExpectedOutput, ...]  # each with its expected class under ``kill``
    description: str = ""  # one line: what the job shows
    cells: Mapping[FaultClass, FaultCell] = {}  # the other fault classes it declares

    def cell(self, fault: FaultClass) -> FaultCell | None:
        """The job's declaration for ``fault`` (``None``: the job has no point for it)."""
        if fault in self.cells:
            return self.cells[fault]
        point = self.crash.point if fault is FaultClass.KILL else None
        return FaultCell(FaultClass.KILL, point, self.crash.batch) if point else None

    def expected(self, fault: FaultClass) -> dict[str, Expectation]:
        """Per output, the outcome the job's guarantee promises under ``fault``."""
        cell = self.cell(fault)
        if cell is None:
            # A kill at a random moment (no point): each output's class under ``kill``.
            kill = fault is FaultClass.KILL and self.crash.kill_after_s is not None
            return {o.name: o.expected for o in self.outputs} if kill else {}
        return {o.name: cell.expected_for(o.name, o.expected) for o in self.outputs}

    @abstractmethod
    def prepare(self, ctx: HarnessContext) -> None:
        """Create the input every run reads (topics, files), once per context."""

    @abstractmethod
    def job_args(self, ctx: HarnessContext, slot: RunSlot) -> list[str]:
        """Command-line arguments of a run writing to ``slot``."""

    def restart_args(self, ctx: HarnessContext, slot: RunSlot) -> list[str]:
        """Arguments of the restart: the faulted run's; never another checkpoint or output."""
        return self.job_args(ctx, slot)

    @abstractmethod
    def read_output(self, ctx: HarnessContext, slot: RunSlot, output: str) -> list[dict[str, Any]]:
        """Every row the runs of ``slot`` left in ``output`` (empty if nothing was written)."""

    def expire_output(self, ctx: HarnessContext, slot: RunSlot, fault: FaultClass) -> None:
        """Do to ``slot``'s outputs what retention does under ``fault`` (between kill and restart)."""
        raise NotImplementedError(f"{self.name} does not implement {fault}")

    #: ``disorder``: the columns comparing input rows with output-plus-late rows (``None``: none).
    accounting: OutputSpec | None = None

    def prepare_disordered(self, ctx: HarnessContext) -> list[dict[str, Any]]:
        """Create input whose event times break the partitions' promise; return one row per
        input row, on :attr:`accounting`'s columns."""
        raise NotImplementedError(f"{self.name} has no disordered input")

    def disorder_args(self, ctx: HarnessContext, slot: RunSlot) -> list[str]:
        """Arguments of a run on the disordered input (the promise it is given included)."""
        return self.job_args(ctx, slot)

    def accounted_rows(
        self, ctx: HarnessContext, slot: RunSlot
    ) -> tuple[list[dict[str, Any]], int]:
        """One row per input row the run accounted for (folded into an output, or late), and
        how many of them are late rows."""
        raise NotImplementedError(f"{self.name} has no late-rows output")

    def checkpoints(self, ctx: HarnessContext, slot: RunSlot) -> list[str]:
        """The Spark checkpoints of the runs of ``slot`` (locations holding a ``metadata``
        file and an ``offsets`` log), which ``checkpoint-reset`` deletes while the output is
        kept."""
        files = storage.list_prefix(slot.out, ctx.settings)
        parents = {
            name.rpartition("/")[0] for name in files if name.rpartition("/")[2] == "metadata"
        }
        logs = {f"/{n}".partition("/offsets/")[0][1:] for n in files if "/offsets/" in f"/{n}"}
        return sorted(slot.at(p) if p else slot.out for p in parents & logs)


@dataclass(frozen=True)
class RecoveryResult:
    """One output under one fault against its declared outcome: ``error`` is the typed error
    the run stopped with (``None``: it recovered), ``comparison`` the output against O_e."""

    job: str
    output: str
    expected: Expectation
    crash: str
    comparison: Comparison
    rows_before_restart: int
    run_seconds: Mapping[str, float] = field(default_factory=dict)
    fault: FaultClass = FaultClass.KILL
    error: str | None = None
    note: str = ""

    @property
    def label(self) -> str:
        """``job/output``: the name used in the table, the report and file names."""
        return f"{self.job}/{self.output}"

    @property
    def recovery_class(self) -> RecoveryClass:
        return self.comparison.recovery_class

    @property
    def observed(self) -> str:
        """The outcome: the typed error's name, or the recovery class."""
        return self.error or self.recovery_class.value

    @property
    def as_expected(self) -> bool:
        """The declared outcome happened (a typed error also requires nothing written)."""
        if isinstance(self.expected, ExpectedError):
            return self.error == self.expected.name and (
                self.recovery_class is RecoveryClass.PRECISE
            )
        return self.error is None and self.recovery_class == self.expected


def delta_table(path: str | Path, settings: storage.StorageSettings | None = None) -> Any:
    """The delta-rs table at ``path`` (a path or URI reached with ``settings``); ``None`` if
    there is no table."""
    from deltalake import DeltaTable

    uri, options = storage.delta_storage(str(path), settings or storage.StorageSettings())
    if not DeltaTable.is_deltatable(uri, options):
        return None
    return DeltaTable(uri, storage_options=options)


def read_delta_rows(
    path: str | Path, columns: Sequence[str], settings: storage.StorageSettings | None = None
) -> list[dict[str, Any]]:
    """Rows of the Delta table at ``path`` (:func:`delta_table`); empty if there is no table."""
    table = delta_table(path, settings)
    return [] if table is None else table.to_pandas(columns=list(columns)).to_dict("records")
