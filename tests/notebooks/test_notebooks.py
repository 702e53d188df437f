"""Every Databricks-style notebook in ``jobs/notebooks`` runs top to bottom locally.

A notebook is a ``.py`` file in Databricks' source format: first line
``# Databricks notebook source``, cells separated by ``# COMMAND ----------``, text cells as
``# MAGIC %md`` lines. Locally it is plain Python; it builds (here: reuses) the SparkSession
and asserts the claims it walks through, so running it is the test.
"""

from __future__ import annotations

import runpy
from pathlib import Path

import pytest

from spark_ext.jobrun import REPO

NOTEBOOKS = sorted((REPO / "jobs" / "notebooks").glob("*.py"))
HEADER = "# Databricks notebook source"
SEPARATOR = "# COMMAND ----------"

#: Notebooks that start job processes (the harness) and kill them: crash tests.
STARTS_JOBS = {"00_recovery_harness.py"}


def cells(path: Path) -> list[str]:
    body = path.read_text().split("\n", 1)[1]
    return [c.strip() for c in body.split(SEPARATOR)]


def test_there_is_a_notebook_per_guarantee():
    names = {p.stem.split("_", 1)[1] for p in NOTEBOOKS}
    assert {
        "recovery_harness",
        "at_most_once",
        "at_least_once",
        "exactly_once_delta",
        "exactly_once_kafka",
        "tracker_windows",
        "ordering_dedup",
    } <= names


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_is_in_databricks_source_format(path: Path):
    assert path.read_text().splitlines()[0] == HEADER
    parts = cells(path)
    assert len(parts) >= 3 and all(parts), "empty cell"
    assert parts[0].startswith("# MAGIC %md"), "a notebook opens with a text cell"
    for cell in parts:
        lines = cell.splitlines()
        if lines[0].startswith("# MAGIC"):
            assert all(line.startswith("# MAGIC") for line in lines), f"mixed cell:\n{cell}"
    compile(path.read_text(), str(path), "exec")


@pytest.mark.integration
@pytest.mark.parametrize(
    "path",
    [
        pytest.param(p, marks=[pytest.mark.crash] if p.name in STARTS_JOBS else [])
        for p in NOTEBOOKS
    ],
    ids=lambda p: p.stem,
)
def test_notebook_runs_top_to_bottom(path: Path, spark, kafka_bootstrap, tmp_path, monkeypatch):
    monkeypatch.setenv("NB_PROFILE", "test")
    monkeypatch.setenv("NB_BOOTSTRAP", kafka_bootstrap)
    monkeypatch.setenv("NB_ROOT", str(tmp_path))
    namespace = runpy.run_path(str(path), run_name="__main__")
    if path.name not in STARTS_JOBS:
        assert namespace["spark"] is spark  # the notebook reused the running session
