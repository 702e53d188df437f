"""``python -m jobs.notebooks NAME``: run a notebook of this folder locally, as Databricks would."""

from __future__ import annotations

import argparse
from pathlib import Path

from jobs.console import configure_logging
from jobs.notebooks import run_notebook

HERE = Path(__file__).resolve().parent


def main(argv: list[str] | None = None) -> int:
    names = sorted(p.stem for p in HERE.glob("[0-9]*.py"))
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("name", choices=names, help="the notebook, e.g. 07_dedup_delta")
    args = parser.parse_args(argv)
    configure_logging()  # as a job logs: the project's INFO lines, other libraries' warnings
    run_notebook(HERE / f"{args.name}.py")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
