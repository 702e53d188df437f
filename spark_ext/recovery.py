"""Recovery-semantics harness: what did a crash do to a job's output?

The harness runs a guarantee job three times as separate processes (:func:`~spark_ext.jobrun.run_job`):

1. **clean**: to its end, never killed. Its output is ``O_e``.
2. **crashed**: with SIGKILL at a chosen crash point (or after a delay). Its partial output is
   ``O_f``.
3. **restarted**: on the crashed run's checkpoint and output, to its end. It adds ``O'``.

It then compares ``O_f + O'`` (everything the crashed and restarted runs left in the output)
with ``O_e`` and names the difference with the recovery classes of seed 001 (after Hwang et
al., "High-availability algorithms for distributed stream processing", ICDE 2005).

Definitions
-----------
Rows are compared on the columns an :class:`OutputSpec` names (never on run-dependent
columns such as write versions). Let ``E`` be the multiset of rows of ``O_e`` and ``R`` the
multiset of rows of ``O_f + O'``; ``missing = E - R`` and ``extra = R - E`` (multiset
differences, so a row written twice where the clean run wrote it once is one extra row).
The classes are tested in this order; the first that holds is the result:

``precise``
    ``missing`` and ``extra`` are both empty: ``R == E``.
``gap``
    ``extra`` is empty and ``missing`` is not: rows were lost, nothing was added.
``rollback-repeating``
    ``missing`` is empty and every extra row is identical to a row of ``E``: the only
    difference is duplicates of correct rows.
``rollback-convergent``
    Some extra row differs from every row of ``E`` (or rows are both missing and extra),
    but the **final state** of ``R`` equals the final state of ``E``. The final state needs a
    :class:`FinalStateView`: per key, the value columns of the last row by the view's order
    columns (ties: the row read last). Without a view the final state is the output itself,
    so this class cannot occur.
``rollback-divergent``
    Anything else: the final output differs from the clean run's.

The differing rows (``missing``, ``extra``, and per-key final-state differences) are kept in
the :class:`Comparison`, printed by :func:`format_table` and listed in the HTML report that
:func:`write_report` writes with one matplotlib PNG per job.

Example
-------
>>> spec = OutputSpec(columns=("id", "v"))
>>> classify([{"id": 1, "v": "a"}], [{"id": 1, "v": "a"}] * 2, spec).recovery_class
<RecoveryClass.ROLLBACK_REPEATING: 'rollback-repeating'>
>>> harness = RecoveryHarness(workdir, bootstrap)            # doctest: +SKIP
>>> [result] = harness.check(registry.get("at_most_once"))   # doctest: +SKIP
>>> result.recovery_class, result.as_expected                # doctest: +SKIP
(<RecoveryClass.GAP: 'gap'>, True)
>>> print(format_table([result]))                            # doctest: +SKIP
"""

from __future__ import annotations

import base64
import html
import importlib
import io
import json
import logging
import math
import re
import shutil
import time
import traceback
import uuid
from abc import ABC, abstractmethod
from collections import Counter
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any

from spark_ext.errors import SparkExtError
from spark_ext.jobrun import JobRun, run_job

log = logging.getLogger(__name__)

Row = Mapping[str, Any]
RowKey = tuple[Hashable, ...]


class RecoveryError(SparkExtError, RuntimeError):
    """Base class of the harness's errors."""


class JobRunFailed(RecoveryError):
    """A clean or restarted run of a job did not exit 0; ``run`` holds its output tail."""

    def __init__(self, job: str, phase: str, run: JobRun) -> None:
        self.job, self.phase, self.run = job, phase, run
        super().__init__(
            f"{job}: {phase} run exited with {run.returncode} after {run.seconds:.0f}s\n"
            f"{run.output_tail[-3000:]}"
        )


class CrashPointNotReached(RecoveryError):
    """The run meant to be killed ended on its own: the crash point was never reached."""

    def __init__(self, job: str, crash: CrashPlan, run: JobRun) -> None:
        self.job, self.crash, self.run = job, crash, run
        super().__init__(
            f"{job}: crash {crash.describe()} not reached, run exited with {run.returncode}\n"
            f"{run.output_tail[-3000:]}"
        )


class RecoveryClass(StrEnum):
    """What a crash did to the output (see the module docstring for the exact definitions)."""

    PRECISE = "precise"
    GAP = "gap"
    ROLLBACK_REPEATING = "rollback-repeating"
    ROLLBACK_CONVERGENT = "rollback-convergent"
    ROLLBACK_DIVERGENT = "rollback-divergent"


@dataclass(frozen=True)
class FinalStateView:
    """How to read an output as a final state: the last ``value`` per ``key`` by ``order``.

    Parameters
    ----------
    key
        Columns that identify an entity (for example ``("user_id",)``).
    value
        Columns that hold the entity's state.
    order
        Columns giving emission order (for example a write version); they may differ between
        runs and are never compared. Empty: rows count in the order they were read.
    """

    key: tuple[str, ...]
    value: tuple[str, ...]
    order: tuple[str, ...] = ()


@dataclass(frozen=True)
class OutputSpec:
    """Which columns of a job's output are compared, and how to read its final state."""

    columns: tuple[str, ...]
    final_state: FinalStateView | None = None

    def __post_init__(self) -> None:
        if not self.columns:
            raise ValueError("OutputSpec.columns must name at least one column")
        if self.final_state is not None:
            unknown = [
                c for c in (*self.final_state.key, *self.final_state.value) if c not in self.columns
            ]
            if unknown:
                raise ValueError(f"final-state columns not in OutputSpec.columns: {unknown}")

    def read_columns(self) -> tuple[str, ...]:
        """Every column a reader must return: the compared ones and the order columns."""
        order = self.final_state.order if self.final_state else ()
        return (*self.columns, *(c for c in order if c not in self.columns))


@dataclass(frozen=True)
class RowDiff:
    """One distinct row whose count differs between the clean and the recovered output."""

    row: dict[str, Any]
    expected_count: int
    observed_count: int

    @property
    def duplicate(self) -> bool:
        """An extra copy of a row the clean run also wrote."""
        return self.expected_count > 0 and self.observed_count > self.expected_count


@dataclass(frozen=True)
class StateDiff:
    """A key whose final state differs; ``None`` means the key is absent on that side."""

    key: dict[str, Any]
    expected: dict[str, Any] | None
    observed: dict[str, Any] | None


@dataclass(frozen=True)
class Comparison:
    """``O_f + O'`` against ``O_e``: the class and the differing rows."""

    recovery_class: RecoveryClass
    expected_rows: int
    observed_rows: int
    missing: tuple[RowDiff, ...]
    extra: tuple[RowDiff, ...]
    final_state_equal: bool
    state_diffs: tuple[StateDiff, ...] = ()

    @property
    def missing_rows(self) -> int:
        return sum(d.expected_count - d.observed_count for d in self.missing)

    @property
    def duplicate_rows(self) -> int:
        return sum(d.observed_count - d.expected_count for d in self.extra if d.duplicate)

    @property
    def differing_rows(self) -> int:
        """Extra rows that are not copies of any clean row."""
        return sum(d.observed_count for d in self.extra if not d.duplicate)


def _normal(value: Any) -> Hashable:
    """A hashable, comparable form of a cell (NaN and None are one missing value)."""
    if value is None:
        return None
    if isinstance(value, float) and math.isnan(value):
        return None
    if hasattr(value, "item") and not isinstance(value, (str, bytes)):  # numpy scalars
        try:
            return _normal(value.item())
        except (ValueError, TypeError):
            pass
    if isinstance(value, (list, tuple)):
        return tuple(_normal(v) for v in value)
    if isinstance(value, dict):
        return tuple(sorted((k, _normal(v)) for k, v in value.items()))
    try:
        if value != value:  # pandas NaT
            return None
    except (TypeError, ValueError):
        pass
    return value


def _project(row: Row, columns: Sequence[str]) -> RowKey:
    try:
        return tuple(_normal(row[c]) for c in columns)
    except KeyError as exc:
        raise ValueError(f"output row lacks compared column {exc.args[0]!r}: {dict(row)}") from None


def _sort_key(item: Any) -> tuple[str, ...]:
    return tuple(repr(v) for v in (item if isinstance(item, tuple) else (item,)))


def final_state(rows: Sequence[Row], view: FinalStateView) -> dict[RowKey, RowKey]:
    """Per key, the value columns of the last row by ``view.order`` (ties: read order)."""
    indexed = list(enumerate(rows))
    if view.order:
        indexed.sort(key=lambda ir: (_project(ir[1], view.order), ir[0]))
    state: dict[RowKey, RowKey] = {}
    for _, row in indexed:
        state[_project(row, view.key)] = _project(row, view.value)
    return state


def classify(expected: Sequence[Row], observed: Sequence[Row], spec: OutputSpec) -> Comparison:
    """Compare ``observed`` (``O_f + O'``) with ``expected`` (``O_e``) and classify it.

    Parameters
    ----------
    expected
        Rows of the clean run, as mappings from column name to value.
    observed
        Rows the crashed run and its restart left in the output, together.
    spec
        The compared columns and, optionally, the final-state view.
    """
    cols = spec.columns
    want = Counter(_project(r, cols) for r in expected)
    got = Counter(_project(r, cols) for r in observed)
    missing = tuple(
        RowDiff(dict(zip(cols, k, strict=True)), want[k], got[k])
        for k in sorted(want - got, key=_sort_key)
    )
    extra = tuple(
        RowDiff(dict(zip(cols, k, strict=True)), want[k], got[k])
        for k in sorted(got - want, key=_sort_key)
    )
    state_diffs: tuple[StateDiff, ...] = ()
    if spec.final_state is not None:
        view = spec.final_state
        want_state, got_state = final_state(expected, view), final_state(observed, view)
        state_diffs = tuple(
            StateDiff(
                dict(zip(view.key, k, strict=True)),
                dict(zip(view.value, want_state[k], strict=True)) if k in want_state else None,
                dict(zip(view.value, got_state[k], strict=True)) if k in got_state else None,
            )
            for k in sorted(set(want_state) | set(got_state), key=_sort_key)
            if want_state.get(k) != got_state.get(k)
        )
        state_equal = not state_diffs
    else:
        state_equal = not missing and not extra

    if not missing and not extra:
        cls = RecoveryClass.PRECISE
    elif not extra:
        cls = RecoveryClass.GAP
    elif not missing and all(d.duplicate for d in extra):
        cls = RecoveryClass.ROLLBACK_REPEATING
    elif spec.final_state is not None and state_equal:
        cls = RecoveryClass.ROLLBACK_CONVERGENT
    else:
        cls = RecoveryClass.ROLLBACK_DIVERGENT
    return Comparison(
        recovery_class=cls,
        expected_rows=sum(want.values()),
        observed_rows=sum(got.values()),
        missing=missing,
        extra=extra,
        final_state_equal=state_equal,
        state_diffs=state_diffs,
    )


# --------------------------------------------------------------------------------------------
# Running a job clean, killed and restarted
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class CrashPlan:
    """Where the crashed run dies: a crash point spec (``name`` or ``name@batch``), or a delay."""

    crash_at: str | None = None
    kill_after_s: float | None = None

    def __post_init__(self) -> None:
        if (self.crash_at is None) == (self.kill_after_s is None):
            raise ValueError("CrashPlan needs exactly one of crash_at and kill_after_s")

    def describe(self) -> str:
        return self.crash_at if self.crash_at else f"SIGKILL after {self.kill_after_s:g}s"


@dataclass(frozen=True)
class HarnessContext:
    """What a case needs to prepare its input and build its runs' arguments."""

    workdir: Path
    bootstrap: str
    profile: str
    tag: str

    def topic(self, name: str) -> str:
        """A topic name unique to this check (``name`` distinguishes input from outputs)."""
        return f"{self.tag}-{name}"


@dataclass(frozen=True)
class RunSlot:
    """One of the two output locations: ``clean`` (``O_e``) or ``crashed`` (``O_f + O'``)."""

    name: str
    out: Path


@dataclass(frozen=True)
class ExpectedOutput:
    """One output of a job, how it is compared, and the class a crash should give it."""

    name: str
    spec: OutputSpec
    expected: RecoveryClass


class RecoveryCase(ABC):
    """A guarantee job as the harness sees it: how to feed it, run it and read its outputs.

    Subclasses set the class attributes and implement the three methods; ``jobs/registry.py``
    holds the project's cases. A job with several outputs (for example a copy of the events
    and a running aggregate) is run once per check and every output is classified.
    """

    #: Short name used by the CLI and the report (``at_most_once``).
    name: str
    #: Module run as ``python -m module``.
    module: str
    crash: CrashPlan
    #: The outputs that are compared, each with its expected class.
    outputs: tuple[ExpectedOutput, ...]
    #: One line: what the job shows.
    description: str = ""

    @abstractmethod
    def prepare(self, ctx: HarnessContext) -> None:
        """Create the input both runs read (topics, files), once per check."""

    @abstractmethod
    def job_args(self, ctx: HarnessContext, slot: RunSlot) -> list[str]:
        """Command-line arguments of a run writing to ``slot``."""

    def restart_args(self, ctx: HarnessContext, slot: RunSlot) -> list[str]:
        """Arguments of the restart; the crashed run's by default.

        A case may change what a restart may change (for example the rate limit, as a restart
        catching up a backlog does), never the checkpoint or the output.
        """
        return self.job_args(ctx, slot)

    @abstractmethod
    def read_output(self, ctx: HarnessContext, slot: RunSlot, output: str) -> list[dict[str, Any]]:
        """Every row the runs of ``slot`` left in ``output`` (empty if nothing was written)."""


@dataclass(frozen=True)
class RecoveryResult:
    """One output's check: the output before the restart, and the comparison."""

    job: str
    output: str
    expected: RecoveryClass
    crash: str
    comparison: Comparison
    rows_before_restart: int
    run_seconds: Mapping[str, float] = field(default_factory=dict)

    @property
    def label(self) -> str:
        """``job/output``: the name used in the table, the report and file names."""
        return f"{self.job}/{self.output}"

    @property
    def recovery_class(self) -> RecoveryClass:
        return self.comparison.recovery_class

    @property
    def as_expected(self) -> bool:
        return self.recovery_class == self.expected


Runner = Callable[..., JobRun]


class InProcessRunner:
    """Run a job's ``main(args)`` in this process, on the SparkSession already running here.

    Only for clean runs (it cannot be killed): it saves a JVM start when the caller already
    holds a session of the profile the job is given (a test session, a notebook's cluster).
    The job's ``build_session`` returns that session, so settings of another profile are
    ignored.
    """

    def __call__(
        self,
        module: str,
        args: Sequence[str] = (),
        crash_at: str | None = None,
        kill_after_s: float | None = None,
        timeout_s: float = 600.0,
    ) -> JobRun:
        if crash_at or kill_after_s is not None:
            raise ValueError("InProcessRunner runs clean runs only")
        start = time.monotonic()
        try:
            code = importlib.import_module(module).main(list(args))
        except Exception:
            return JobRun(1, time.monotonic() - start, traceback.format_exc())
        return JobRun(int(code or 0), time.monotonic() - start, "")


class RecoveryHarness:
    """Run cases clean, crashed and restarted, and classify what the crash did.

    Parameters
    ----------
    workdir
        Folder for the runs' outputs and checkpoints: one subfolder per case, emptied at the
        start of each check of that case.
    bootstrap
        Kafka bootstrap servers the cases use.
    profile
        Configuration profile passed to the jobs (``--profile``).
    runner
        Runs one job process; :func:`~spark_ext.jobrun.run_job` unless a test replaces it.
    timeout_s
        Limit for each run.
    parallel
        Run the clean run at the same time as the crashed one (they share only the input),
        which saves one job start-up of wall time; not with an :class:`InProcessRunner`.
    clean_runner
        Runs the clean run, ``runner`` by default; :class:`InProcessRunner` where a session
        of the jobs' profile is already running.
    """

    def __init__(
        self,
        workdir: Path,
        bootstrap: str,
        profile: str = "test",
        runner: Runner = run_job,
        timeout_s: float = 600.0,
        parallel: bool = True,
        clean_runner: Runner | None = None,
    ) -> None:
        self.clean_runner = clean_runner or runner
        self.workdir = Path(workdir)
        self.parallel = parallel
        self.bootstrap = bootstrap
        self.profile = profile
        self.runner = runner
        self.timeout_s = timeout_s

    def context(self, case: RecoveryCase) -> HarnessContext:
        """A fresh context for one check of ``case``: its folder and a unique topic tag."""
        tag = re.sub(r"[^a-zA-Z0-9-]", "-", f"rec-{case.name}-{uuid.uuid4().hex[:8]}")
        return HarnessContext(self.workdir / case.name, self.bootstrap, self.profile, tag)

    def _run_clean(self, case: RecoveryCase, ctx: HarnessContext, slot: RunSlot) -> JobRun:
        run = self.clean_runner(case.module, case.job_args(ctx, slot), timeout_s=self.timeout_s)
        if not run.ok:
            raise JobRunFailed(case.name, "clean", run)
        return run

    def check(self, case: RecoveryCase) -> list[RecoveryResult]:
        """Run ``case`` clean, then killed and restarted; classify each of its outputs."""
        ctx = self.context(case)
        shutil.rmtree(ctx.workdir, ignore_errors=True)  # a previous check's checkpoints
        ctx.workdir.mkdir(parents=True)
        case.prepare(ctx)
        clean = RunSlot("clean", ctx.workdir / "clean")
        crashed = RunSlot("crashed", ctx.workdir / "crashed")
        seconds: dict[str, float] = {}

        # An in-process clean run stays on this thread: Spark resolves session state (such as
        # registered Python data sources) through the thread's active session.
        parallel = self.parallel and not isinstance(self.clean_runner, InProcessRunner)
        log.info("%s: clean run%s", case.name, " (alongside the crashed run)" * parallel)
        with ThreadPoolExecutor(max_workers=1) as pool:
            clean_run: Future[JobRun] | None = None
            if parallel:
                clean_run = pool.submit(self._run_clean, case, ctx, clean)
            else:
                seconds["clean"] = self._run_clean(case, ctx, clean).seconds

            log.info("%s: run killed at %s", case.name, case.crash.describe())
            run = self.runner(
                case.module,
                case.job_args(ctx, crashed),
                crash_at=case.crash.crash_at,
                kill_after_s=case.crash.kill_after_s,
                timeout_s=self.timeout_s,
            )
            seconds["crashed"] = run.seconds
            if clean_run is not None:
                seconds["clean"] = clean_run.result().seconds
        if not run.killed:
            raise CrashPointNotReached(case.name, case.crash, run)
        before = {o.name: len(case.read_output(ctx, crashed, o.name)) for o in case.outputs}

        log.info("%s: restart from the checkpoint", case.name)
        run = self.runner(case.module, case.restart_args(ctx, crashed), timeout_s=self.timeout_s)
        seconds["restarted"] = run.seconds
        if not run.ok:
            raise JobRunFailed(case.name, "restarted", run)

        results = []
        seconds = {k: seconds[k] for k in ("clean", "crashed", "restarted")}
        for out in case.outputs:
            comparison = classify(
                case.read_output(ctx, clean, out.name),
                case.read_output(ctx, crashed, out.name),
                out.spec,
            )
            result = RecoveryResult(
                case.name,
                out.name,
                out.expected,
                case.crash.describe(),
                comparison,
                before[out.name],
                seconds,
            )
            log.info("%s: %s (expected %s)", result.label, result.recovery_class, out.expected)
            results.append(result)
        return results


def forget_last_commit(checkpoint: Path) -> int:
    """Delete the newest entry of a query's commit log; returns its batch id.

    This leaves the checkpoint as a driver killed after the sink's write and before Spark's
    commit log does: the next start of the query runs that batch again with the same offsets.
    It is the in-process stand-in for a SIGKILL at that point (notebooks, quick tests); the
    harness kills real processes. Stop the query first.
    """
    commits = Path(checkpoint) / "commits"
    ids = sorted(int(p.name) for p in commits.iterdir() if p.name.isdigit())
    if not ids:
        raise RecoveryError(f"{commits} has no committed batch")
    (commits / str(ids[-1])).unlink()
    (commits / f".{ids[-1]}.crc").unlink(missing_ok=True)
    log.info("forgot the commit of batch %d in %s", ids[-1], checkpoint)
    return ids[-1]


# --------------------------------------------------------------------------------------------
# Reading outputs
# --------------------------------------------------------------------------------------------


def read_delta_rows(path: Path, columns: Sequence[str]) -> list[dict[str, Any]]:
    """Rows of the Delta table at ``path`` (read with delta-rs); empty if there is no table."""
    from deltalake import DeltaTable

    if not DeltaTable.is_deltatable(str(path)):
        return []
    frame = DeltaTable(str(path)).to_pandas(columns=list(columns))
    return frame.to_dict("records")


def read_kafka_json_rows(bootstrap: str, topic: str) -> list[dict[str, Any]]:
    """Committed JSON records of ``topic`` as rows, with ``partition`` and ``offset`` added."""
    from connectors.kafka import consume_all

    rows = []
    for partition, offset, _key, value in consume_all(bootstrap, topic):
        row = dict(json.loads(value))
        row.setdefault("partition", partition)
        row.setdefault("offset", offset)
        rows.append(row)
    return rows


# --------------------------------------------------------------------------------------------
# Table and report
# --------------------------------------------------------------------------------------------

TABLE_COLUMNS = (
    "job/output",
    "crash",
    "expected",
    "observed",
    "clean rows",
    "recovered rows",
    "missing",
    "duplicate",
    "differing",
    "ok",
)


def table_rows(results: Iterable[RecoveryResult]) -> list[tuple[str, ...]]:
    """One row of :data:`TABLE_COLUMNS` per result."""
    return [
        (
            r.label,
            r.crash,
            str(r.expected),
            str(r.recovery_class),
            str(r.comparison.expected_rows),
            str(r.comparison.observed_rows),
            str(r.comparison.missing_rows),
            str(r.comparison.duplicate_rows),
            str(r.comparison.differing_rows),
            "yes" if r.as_expected else "NO",
        )
        for r in results
    ]


def format_table(results: Iterable[RecoveryResult]) -> str:
    """A plain-text table of the results, one line per job."""
    rows = [TABLE_COLUMNS, *table_rows(results)]
    widths = [max(len(row[i]) for row in rows) for i in range(len(TABLE_COLUMNS))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)) for row in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(line.rstrip() for line in lines)


def plot_result(result: RecoveryResult) -> bytes:
    """A PNG bar chart of one result: clean vs recovered rows, and what differs."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    c = result.comparison
    labels = [
        "clean\nO_e",
        "before restart\nO_f",
        "recovered\nO_f + O'",
        "missing",
        "duplicate",
        "differing",
    ]
    values = [
        c.expected_rows,
        result.rows_before_restart,
        c.observed_rows,
        c.missing_rows,
        c.duplicate_rows,
        c.differing_rows,
    ]
    colours = ["#4c72b0", "#8c8c8c", "#55a868", "#c44e52", "#dd8452", "#8172b3"]
    fig, ax = plt.subplots(figsize=(7.5, 3.6), dpi=100)
    bars = ax.bar(labels, values, color=colours)
    ax.bar_label(bars)
    ax.set_ylabel("rows")
    verdict = "as expected" if result.as_expected else f"expected {result.expected}"
    ax.set_title(
        f"{result.label}: {result.recovery_class} ({verdict}); crash {result.crash}", fontsize=10
    )
    ax.tick_params(axis="x", labelsize=8)
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    plt.close(fig)
    return buf.getvalue()


def _html_rows(title: str, diffs: Sequence[RowDiff], limit: int) -> str:
    if not diffs:
        return ""
    cols = list(diffs[0].row)
    head = "".join(f"<th>{html.escape(c)}</th>" for c in [*cols, "clean", "recovered"])
    body = "".join(
        "<tr>"
        + "".join(f"<td>{html.escape(str(d.row[c]))}</td>" for c in cols)
        + f"<td>{d.expected_count}</td><td>{d.observed_count}</td></tr>"
        for d in diffs[:limit]
    )
    more = f"<p>... {len(diffs) - limit} more</p>" if len(diffs) > limit else ""
    return f"<h3>{html.escape(title)} ({len(diffs)})</h3><table><tr>{head}</tr>{body}</table>{more}"


def _html_state(diffs: Sequence[StateDiff], limit: int) -> str:
    if not diffs:
        return ""
    body = "".join(
        f"<tr><td>{html.escape(json.dumps(d.key, default=str))}</td>"
        f"<td>{html.escape(json.dumps(d.expected, default=str))}</td>"
        f"<td>{html.escape(json.dumps(d.observed, default=str))}</td></tr>"
        for d in diffs[:limit]
    )
    return (
        f"<h3>final state differs ({len(diffs)} keys)</h3>"
        f"<table><tr><th>key</th><th>clean</th><th>recovered</th></tr>{body}</table>"
    )


def write_report(results: Sequence[RecoveryResult], folder: Path, limit: int = 50) -> Path:
    """Write ``folder/index.html`` with the table, one PNG per output and the differing rows.

    The PNGs are written next to the page (``<job>-<output>.png``) and referenced from it.
    Returns the page's path.
    """
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    sections = []
    for r in results:
        png = folder / f"{r.job}-{r.output}.png"
        png.write_bytes(plot_result(r))
        c = r.comparison
        sections.append(
            f"<section id='{html.escape(r.label)}'><h2>{html.escape(r.label)}: "
            f"{html.escape(str(r.recovery_class))}</h2>"
            f"<p>expected {html.escape(str(r.expected))}, crash {html.escape(r.crash)}, "
            f"final state {'equal' if c.final_state_equal else 'differs'}; runs "
            + ", ".join(f"{k} {v:.0f}s" for k, v in r.run_seconds.items())
            + f"</p><img src='{png.name}' alt='{html.escape(r.label)} rows'>"
            + _html_rows("missing rows", c.missing, limit)
            + _html_rows("extra rows", c.extra, limit)
            + _html_state(c.state_diffs, limit)
            + "</section>"
        )
    head = "".join(f"<th>{html.escape(c)}</th>" for c in TABLE_COLUMNS)
    body = "".join(
        "<tr>" + "".join(f"<td>{html.escape(cell)}</td>" for cell in row) + "</tr>"
        for row in table_rows(results)
    )
    page = (
        "<!doctype html><html><head><meta charset='utf-8'><title>spark_ext recovery report</title>"
        "<style>body{font-family:sans-serif;margin:2em}table{border-collapse:collapse;"
        "margin:.5em 0}td,th{border:1px solid #ccc;padding:2px 6px;font-size:90%}</style>"
        "</head><body><h1>Recovery report</h1>"
        "<p>O_e: output of a clean run; O_f + O': output of a run killed with SIGKILL and "
        "restarted from its checkpoint. Classes as in seed 001.</p>"
        f"<table><tr>{head}</tr>{body}</table>{''.join(sections)}</body></html>"
    )
    index = folder / "index.html"
    index.write_text(page)
    log.info("recovery report: %s", index)
    return index


def png_data_uri(png: bytes) -> str:
    """``png`` as a ``data:`` URI (for notebooks that display the plot inline)."""
    return "data:image/png;base64," + base64.b64encode(png).decode()
