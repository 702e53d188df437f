"""The harness's results as a plain-text table and an HTML report with one plot per output."""

from __future__ import annotations

import html
import io
import json
import logging
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

from spark_ext.recovery.case import RecoveryResult
from spark_ext.recovery.classification import RowDiff, StateDiff

__all__ = [
    "TABLE_COLUMNS",
    "format_table",
    "html_table",
    "plot_result",
    "result_id",
    "result_section",
    "table_rows",
    "text_table",
    "write_page",
    "write_report",
]

log = logging.getLogger(__name__)

#: How many differing rows (or keys) a report shows per output.
ROWS_SHOWN = 50
#: The table's columns: each header and how a result fills it.
TABLE_COLUMNS: dict[str, Callable[[RecoveryResult], object]] = {
    "job/output": lambda r: r.label,
    "fault": lambda r: r.crash,
    "expected": lambda r: r.expected,
    "observed": lambda r: r.observed,
    "clean rows": lambda r: r.comparison.expected_rows,
    "recovered rows": lambda r: r.comparison.observed_rows,
    "missing": lambda r: r.comparison.missing_rows,
    "duplicate": lambda r: r.comparison.duplicate_rows,
    "differing": lambda r: r.comparison.differing_rows,
    "ok": lambda r: "yes" if r.as_expected else "NO",
}


def table_rows(results: Iterable[RecoveryResult]) -> list[tuple[str, ...]]:
    """One row of :data:`TABLE_COLUMNS` per result."""
    return [tuple(str(column(r)) for column in TABLE_COLUMNS.values()) for r in results]


def text_table(rows: Sequence[Sequence[str]]) -> list[str]:
    """``rows`` (the first one the header) as aligned text lines, a rule under the header."""
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)) for row in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return [line.rstrip() for line in lines]


def format_table(results: Iterable[RecoveryResult]) -> str:
    """A plain-text table of the results, one line per job."""
    return "\n".join(text_table([tuple(TABLE_COLUMNS), *table_rows(results)]))


def _table(head: Sequence[str], rows: Iterable[Sequence[object]]) -> str:
    """An HTML table: ``head`` over ``rows``, every cell escaped."""

    def cells(tag: str, row: Sequence[object]) -> str:
        return "".join(f"<{tag}>{html.escape(str(c))}</{tag}>" for c in row)

    body = "".join(f"<tr>{cells('td', row)}</tr>" for row in rows)
    return f"<table><tr>{cells('th', head)}</tr>{body}</table>"


def html_table(results: Iterable[RecoveryResult]) -> str:
    """The results as an HTML table of :data:`TABLE_COLUMNS`."""
    return _table(list(TABLE_COLUMNS), table_rows(results))


def write_page(folder: Path, title: str, intro: str, body: str) -> Path:
    """Write ``folder/index.html`` (``intro``: HTML after the heading); returns its path."""
    index = Path(folder) / "index.html"
    index.write_text(
        f"<!doctype html><html><head><meta charset='utf-8'><title>spark_ext {title}</title>"
        "<style>body{font-family:sans-serif;margin:2em}table{border-collapse:collapse;"
        "margin:.5em 0}td,th{border:1px solid #ccc;padding:2px 6px;font-size:90%}</style>"
        f"</head><body><h1>{title.capitalize()}</h1>{intro}{body}</body></html>"
    )
    log.info("%s: %s", title, index)
    return index


def plot_result(result: RecoveryResult) -> bytes:
    """A PNG bar chart of one result: clean vs recovered rows, and what differs."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    c = result.comparison
    labels, values, colours = zip(
        ("clean\nO_e", c.expected_rows, "#4c72b0"),
        ("before restart\nO_f", result.rows_before_restart, "#8c8c8c"),
        ("recovered\nO_f + O'", c.observed_rows, "#55a868"),
        ("missing", c.missing_rows, "#c44e52"),
        ("duplicate", c.duplicate_rows, "#dd8452"),
        ("differing", c.differing_rows, "#8172b3"),
        strict=True,
    )
    fig, ax = plt.subplots(figsize=(7.5, 3.6), dpi=100)
    bars = ax.bar(list(labels), list(values), color=list(colours))
    ax.bar_label(bars)
    ax.set_ylabel("rows")
    verdict = "as expected" if result.as_expected else f"expected {result.expected}"
    ax.set_title(f"{result.label}: {result.observed} ({verdict}); {result.crash}", fontsize=10)
    ax.tick_params(axis="x", labelsize=8)
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    plt.close(fig)
    return buf.getvalue()


def _html_rows(title: str, diffs: Sequence[RowDiff]) -> str:
    if not diffs:
        return ""
    cols = list(diffs[0].row)
    shown = diffs[:ROWS_SHOWN]
    rows = ([*(d.row[c] for c in cols), d.expected_count, d.observed_count] for d in shown)
    more = f"<p>... {len(diffs) - len(shown)} more</p>" if len(diffs) > len(shown) else ""
    table = _table([*cols, "clean", "recovered"], rows)
    return f"<h3>{html.escape(title)} ({len(diffs)})</h3>{table}{more}"


def _html_state(diffs: Sequence[StateDiff]) -> str:
    if not diffs:
        return ""
    rows = [[json.dumps(v, default=str) for v in (d.key, d.expected, d.observed)] for d in diffs]
    table = _table(("key", "clean", "recovered"), rows[:ROWS_SHOWN])
    return f"<h3>final state differs ({len(diffs)} keys)</h3>{table}"


def result_id(result: RecoveryResult) -> str:
    """The HTML id (and file stem) of one result: ``job-fault-output``."""
    return f"{result.job}-{result.fault}-{result.output}"


def result_section(result: RecoveryResult, folder: Path) -> str:
    """One result's HTML section: its plot (written to ``folder``) and the differing rows."""
    r, c = result, result.comparison
    png = folder / f"{result_id(r)}.png"
    png.write_bytes(plot_result(r))
    return (
        f"<section id='{html.escape(result_id(r))}'><h2>{html.escape(r.label)} under "
        f"{html.escape(str(r.fault))}: {html.escape(r.observed)}</h2>"
        f"<p>expected {html.escape(str(r.expected))}, {html.escape(r.crash)}, "
        f"{html.escape(r.note)}; final state {'equal' if c.final_state_equal else 'differs'}; "
        "runs "
        + ", ".join(f"{k} {v:.0f}s" for k, v in r.run_seconds.items())
        + f"</p><img src='{png.name}' alt='{html.escape(r.label)} rows'>"
        + _html_rows("missing rows", c.missing)
        + _html_rows("extra rows", c.extra)
        + _html_state(c.state_diffs)
        + "</section>"
    )


def write_report(results: Sequence[RecoveryResult], folder: Path) -> Path:
    """Write ``folder/index.html``: the table, then per output its PNG (beside the page) and
    differing rows. Returns the page's path."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    sections = "".join(result_section(r, folder) for r in results)
    intro = (
        "<p>O_e: output of a clean run; O_f + O': output of a run under a fault (SIGKILL, unless "
        "the fault column says otherwise) and its restart from the checkpoint. Recovery classes "
        'after Hwang et al., "High-availability algorithms for distributed stream '
        'processing" (ICDE 2005).</p>'
    )
    return write_page(folder, "recovery report", intro, html_table(results) + sections)
