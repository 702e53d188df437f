"""The fault matrix: every job under every fault class, each cell against its expectation (per
job one clean run, then each declared cell, ``checkpoint-reset`` last), and its HTML picture."""

from __future__ import annotations

import html
import io
import logging
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path

from spark_ext.recovery.case import RecoveryCase, RecoveryResult
from spark_ext.recovery.errors import FaultNotApplicable, RecoveryError
from spark_ext.recovery.faults import BROKER_FAULTS, FAULT_DOCS, FaultClass
from spark_ext.recovery.harness import RecoveryHarness
from spark_ext.recovery.report import html_table, result_id, result_section, text_table, write_page
from spark_ext.recovery.runs import CleanRun

__all__ = [
    "COLOURS",
    "OWN_CONTEXT_FAULTS",
    "CellStatus",
    "MatrixCell",
    "format_matrix",
    "plot_matrix",
    "run_job_cells",
    "run_plan",
    "write_matrix_report",
]

log = logging.getLogger(__name__)

#: Fault classes whose cells run in a context of their own, without the job's clean run.
OWN_CONTEXT_FAULTS = BROKER_FAULTS | {FaultClass.DISORDER}


class CellStatus(StrEnum):
    """How a cell's outcome compares with the job's declaration."""

    AS_EXPECTED = "as expected"
    UNEXPECTED = "UNEXPECTED"
    ERROR = "error"
    NOT_APPLICABLE = "n/a"


@dataclass(frozen=True)
class MatrixCell:
    """One job under one fault class: its per-output results, or why there are none."""

    job: str
    fault: FaultClass
    results: tuple[RecoveryResult, ...] = ()
    #: The harness error's class and message when the cell could not be judged.
    error: str = ""
    not_applicable: bool = False

    @property
    def status(self) -> CellStatus:
        if self.not_applicable:
            return CellStatus.NOT_APPLICABLE
        if self.error or not self.results:
            return CellStatus.ERROR
        if all(r.as_expected for r in self.results):
            return CellStatus.AS_EXPECTED
        return CellStatus.UNEXPECTED

    def _per_output(self, outcome: str) -> str:
        if len(self.results) == 1:
            return str(getattr(self.results[0], outcome))
        return ", ".join(f"{r.output}: {getattr(r, outcome)}" for r in self.results)

    @property
    def observed(self) -> str:
        """The outcome per output (``events: precise``), or the status."""
        return self._per_output("observed") if self.results else str(self.status)

    @property
    def expected(self) -> str:
        return self._per_output("expected")

    @property
    def anchor(self) -> str:
        return f"{self.job}-{self.fault}"


def _order(faults: Sequence[FaultClass]) -> list[FaultClass]:
    """Faults in run order: the ones on the clean context, then checkpoint-reset, then brokers."""
    reset, rank = FaultClass.CHECKPOINT_RESET, list(FaultClass)
    return sorted(
        dict.fromkeys(faults),
        key=lambda f: (2 if f in OWN_CONTEXT_FAULTS else int(f is reset), rank.index(f)),
    )


def run_job_cells(
    harness: RecoveryHarness, case: RecoveryCase, faults: Sequence[FaultClass]
) -> list[MatrixCell]:
    """Every requested fault class of one job, on one shared clean run."""
    cells: list[MatrixCell] = []
    clean: CleanRun | None = None
    clean_error = ""
    for fault in _order(faults):
        if case.cell(fault) is None:
            cells.append(MatrixCell(case.name, fault, not_applicable=True))
            continue
        try:
            if fault not in OWN_CONTEXT_FAULTS and clean is None and not clean_error:
                ctx = harness.context(case)
                case.prepare(ctx)
                clean = harness.clean_run(case, ctx)
        except RecoveryError as exc:
            clean_error = f"{type(exc).__name__}: {exc}"
        if fault not in OWN_CONTEXT_FAULTS and clean_error:
            cells.append(MatrixCell(case.name, fault, error=clean_error))
            continue
        try:
            results = harness.run_cell(case, fault, clean)
            cells.append(MatrixCell(case.name, fault, tuple(results)))
        except FaultNotApplicable as exc:  # declared, but this machine cannot inject it
            cells.append(MatrixCell(case.name, fault, error=str(exc), not_applicable=True))
        except Exception as exc:  # not judged, or the harness failed (a store refused a request)
            bug = not isinstance(exc, RecoveryError)
            log.warning("%s under %s: %s", case.name, fault, exc, exc_info=bug)
            cells.append(MatrixCell(case.name, fault, error=f"{type(exc).__name__}: {exc}"))
    return cells


def run_plan(
    harness: RecoveryHarness,
    plan: Sequence[tuple[RecoveryCase, Sequence[FaultClass]]],
    jobs_parallel: int = 1,
) -> list[MatrixCell]:
    """Run each case under its own fault classes; jobs in parallel up to ``jobs_parallel``."""
    with ThreadPoolExecutor(max_workers=max(1, jobs_parallel)) as pool:
        per_job = list(pool.map(lambda job: run_job_cells(harness, *job), plan))
    return [cell for cells in per_job for cell in cells]


def _grid(
    cells: Sequence[MatrixCell],
) -> tuple[list[str], list[FaultClass], dict[tuple[str, FaultClass], MatrixCell]]:
    """The jobs (rows) and faults (columns) in order of appearance, and each cell by both."""
    jobs = list(dict.fromkeys(c.job for c in cells))
    faults = list(dict.fromkeys(c.fault for c in cells))
    return jobs, faults, {(c.job, c.fault): c for c in cells}


def format_matrix(cells: Sequence[MatrixCell]) -> str:
    """A plain-text matrix: one line per job, one column per fault class."""
    jobs, faults, by = _grid(cells)

    def text(cell: MatrixCell | None) -> str:
        if cell is None or not cell.results:
            return "" if cell is None else str(cell.status)
        want = f" (want {cell.expected})" if cell.status is CellStatus.UNEXPECTED else ""
        return cell.observed + want

    rows = [("job", *map(str, faults))] + [
        (job, *(text(by.get((job, f))) for f in faults)) for job in jobs
    ]
    lines = text_table(rows)
    problems = [c for c in cells if c.status in (CellStatus.UNEXPECTED, CellStatus.ERROR)]
    for c in problems:
        detail = c.error or f"{c.observed}, declared {c.expected}"
        summary = [t for t in detail.splitlines() if t.strip()][:1]
        summary += [t for t in detail.splitlines() if t.startswith("cause: ")][:1]
        lines.append(f"{c.status}: {c.job} under {c.fault}: " + " | ".join(summary)[:600])
    return "\n".join(lines)


#: Colour of an outcome in the matrix picture.
COLOURS = {
    "precise": "#55a868",
    "gap": "#c44e52",
    "rollback-repeating": "#dd8452",
    "rollback-convergent": "#ccb974",
    "rollback-divergent": "#8172b3",
    "typed error": "#4c72b0",
    "error": "#8c8c8c",
    "n/a": "#f0f0f0",
}


def _colour_key(cell: MatrixCell) -> str:
    if cell.status is CellStatus.NOT_APPLICABLE:
        return "n/a"
    if cell.status is CellStatus.ERROR:
        return "error"
    # The output furthest from precise decides the colour.
    off = (r for r in cell.results if not r.as_expected or r.observed != "precise")
    worst = next(off, cell.results[0])
    return "typed error" if worst.error else worst.observed


def _cell_label(cell: MatrixCell) -> str:
    """The text in a picture cell: each output's outcome, and what was declared if it differs."""
    if not cell.results:
        return str(cell.status)
    lines = [r.observed.removeprefix("rollback-") for r in cell.results]
    if cell.status is CellStatus.UNEXPECTED:
        lines.append("declared: " + cell.expected.replace("rollback-", ""))
    return "\n".join(dict.fromkeys(lines))


def plot_matrix(cells: Sequence[MatrixCell]) -> tuple[bytes, dict[str, tuple[int, int, int, int]]]:
    """The matrix as a PNG, and each cell's pixel box (left, top, right, bottom) by anchor."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch, Rectangle

    jobs, faults, by = _grid(cells)
    fig, ax = plt.subplots(figsize=(2.0 + 1.45 * len(faults), 1.4 + 0.42 * len(jobs)), dpi=100)
    ax.set_xlim(0, len(faults))
    ax.set_ylim(len(jobs), 0)
    boxes: dict[str, tuple[float, float, float, float]] = {}
    for y, job in enumerate(jobs):
        for x, fault in enumerate(faults):
            cell = by.get((job, fault))
            if cell is None:
                continue
            key = _colour_key(cell)
            unexpected = cell.status in (CellStatus.UNEXPECTED, CellStatus.ERROR)
            ax.add_patch(
                Rectangle(
                    (x + 0.03, y + 0.06),
                    0.94,
                    0.88,
                    facecolor=COLOURS[key],
                    edgecolor="black" if unexpected else "white",
                    linewidth=2.5 if unexpected else 0.5,
                    hatch="//" if unexpected else None,
                )
            )
            ax.text(x + 0.5, y + 0.5, _cell_label(cell), ha="center", va="center", fontsize=6.5)
            boxes[cell.anchor] = (x, y, x + 1, y + 1)
    ax.set_xticks([i + 0.5 for i in range(len(faults))], [str(f) for f in faults], fontsize=8)
    ax.xaxis.tick_top()
    ax.set_yticks([i + 0.5 for i in range(len(jobs))], jobs, fontsize=8)
    ax.tick_params(length=0)
    for side in ax.spines.values():
        side.set_visible(False)
    ax.legend(
        handles=[Patch(facecolor=c, label=k) for k, c in COLOURS.items()],
        loc="upper center",
        bbox_to_anchor=(0.5, -0.02),
        ncol=4,
        fontsize=7,
        frameon=False,
    )
    fig.tight_layout()
    fig.canvas.draw()
    height = fig.canvas.get_width_height()[1]
    pixels: dict[str, tuple[int, int, int, int]] = {}
    for anchor, (x0, y0, x1, y1) in boxes.items():
        (px0, py0), (px1, py1) = ax.transData.transform([(x0, y0), (x1, y1)])
        top, bottom = sorted((height - py0, height - py1))
        pixels[anchor] = (round(px0), round(top), round(px1), round(bottom))
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    plt.close(fig)
    return buf.getvalue(), pixels


def write_matrix_report(cells: Sequence[MatrixCell], folder: Path) -> Path:
    """Write ``folder/index.html``: the matrix picture (cells link to their diffs), the table,
    and one section per cell and output. Returns the page's path."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    png, boxes = plot_matrix(cells)
    (folder / "matrix.png").write_bytes(png)
    areas = "".join(
        f"<area shape='rect' coords='{x0},{y0},{x1},{y1}' href='#{html.escape(a)}' alt='{html.escape(a)}'>"
        for a, (x0, y0, x1, y1) in boxes.items()
    )
    sections = []
    for c in cells:
        inner = "".join(
            f"<a href='#{html.escape(result_id(r))}'>{html.escape(r.output)}</a> "
            for r in c.results
        )
        sections.append(
            f"<section id='{html.escape(c.anchor)}'><h2>{html.escape(c.job)} under "
            f"{html.escape(str(c.fault))}: {html.escape(str(c.status))}</h2>"
            f"<p>{html.escape(FAULT_DOCS[c.fault])}. Observed {html.escape(c.observed)}"
            + (f", declared {html.escape(c.expected)}" if c.results else "")
            + f". {inner}</p>"
            + (f"<pre>{html.escape(c.error[:4000])}</pre>" if c.error else "")
            + "".join(result_section(r, folder) for r in c.results)
            + "</section>"
        )
    intro = (
        "<p>Each guarantee job under each fault class; a cell is coloured by its outcome "
        '(the recovery classes of Hwang et al., "High-availability algorithms for distributed '
        'stream processing", ICDE 2005, or a typed error with nothing written) and outlined '
        "and hatched where the outcome is not the one the job declares. Click a cell for its "
        "differing rows.</p>"
        "<img src='matrix.png' usemap='#matrix' alt='fault matrix'>"
        f"<map name='matrix'>{areas}</map>"
    )
    results = html_table([r for c in cells for r in c.results])
    return write_page(folder, "fault matrix", intro, results + "".join(sections))
