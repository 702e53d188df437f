"""Every Databricks-style notebook in ``jobs/notebooks`` runs top to bottom locally.

A notebook is a ``.py`` file in Databricks' source format: first line
``# Databricks notebook source``, cells separated by ``# COMMAND ----------``, text cells as
``# MAGIC %md`` lines. It installs the project (``%pip``) and shares its set-up the Databricks
way (``%run ./_setup``); :func:`jobs.notebooks.run_notebook` runs it here as Databricks would,
following ``%run``. It builds (here: reuses) the SparkSession and asserts the claims it walks
through, so running it is the test.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from jobs.notebooks import HEADER, NotebookSetupError, check_root, run_notebook
from jobs.notebooks import cells as notebook_cells
from spark_ext.jobrun import REPO

FOLDER = REPO / "jobs" / "notebooks"
NOTEBOOKS = sorted(FOLDER.glob("[0-9]*.py"))
SETUP = FOLDER / "_setup.py"

#: Notebooks that start job processes (the harness) and kill them: crash tests.
STARTS_JOBS = {"00_recovery_harness.py"}
#: The harness notebook runs a job clean, killed and restarted (1.5 min): heavy, as the full
#: fault matrix; in CI the harness runs those jobs in tests/spark_ext/recovery (the suite's budget).
HARNESS_RUNS = pytest.mark.heavy


def cells(path: Path) -> list[str]:
    return notebook_cells(path)


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


@pytest.mark.parametrize("path", [*NOTEBOOKS, SETUP], ids=lambda p: p.stem)
def test_notebook_is_in_databricks_source_format(path: Path):
    assert path.read_text().splitlines()[0] == HEADER
    parts = cells(path)
    assert len(parts) >= (2 if path == SETUP else 3) and all(parts), "empty cell"
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
        pytest.param(p, marks=[pytest.mark.crash, HARNESS_RUNS] if p.name in STARTS_JOBS else [])
        for p in NOTEBOOKS
    ],
    ids=lambda p: p.stem,
)
def test_notebook_runs_top_to_bottom(path: Path, spark, kafka_bootstrap, tmp_path, monkeypatch):
    monkeypatch.setenv("NB_PROFILE", "test")
    monkeypatch.setenv("NB_BOOTSTRAP", kafka_bootstrap)
    monkeypatch.setenv("NB_ROOT", str(tmp_path))
    namespace = run_notebook(path)
    if path.name not in STARTS_JOBS:
        assert namespace["spark"] is spark  # the notebook reused the running session


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_installs_the_wheel_then_runs_the_shared_setup(path: Path):
    """Every notebook opens the same way: its text, ``%pip install``, ``%run ./_setup``."""
    parts = cells(path)
    assert parts[1].startswith("# MAGIC %pip install"), "cell 2 installs the wheel"
    assert parts[2] == "# MAGIC %run ./_setup", "cell 3 runs the shared set-up"
    code = "\n".join(c for c in parts if not c.startswith("# MAGIC"))
    for needless in ("dbutils.widgets", "build_session", "127.0.0.1", "/dbfs"):
        assert needless not in code, f"{needless} belongs to ./_setup"
    assert parts[-1].startswith('print("topics deleted:", cleanup())'), "the run cleans up"


@pytest.mark.parametrize(
    ("root", "ok"),
    [
        ("/Volumes/main/default/spark_ext", True),
        ("dbfs:/tmp/spark_ext", False),
        ("/dbfs/tmp/spark_ext", False),
        ("tmp/spark_ext", False),
    ],
)
def test_run_root_must_be_one_path_spark_and_python_read_alike(root: str, ok: bool):
    if ok:
        assert check_root(root) == Path(root)
    else:
        with pytest.raises(NotebookSetupError) as info:
            check_root(root)
        assert info.value.setting == "root"


def test_workspace_setup_requires_the_bootstrap_widget():
    from jobs.notebooks import setup

    class Widgets:
        def __init__(self):
            self.values = {}

        def text(self, name, default, label=None):
            self.values.setdefault(name, default)

        def get(self, name):
            return self.values[name]

    class DbUtils:
        widgets = Widgets()

    with pytest.raises(NotebookSetupError) as info:
        setup({"dbutils": DbUtils(), "spark": object(), "display": print})
    assert info.value.setting == "bootstrap"


@pytest.mark.parametrize("path", NOTEBOOKS[:1])
def test_runner_follows_percent_run_into_the_setup(path: Path, monkeypatch, tmp_path):
    """%run ./_setup defines the shared names before the notebook's own cells use them."""
    calls = []
    import jobs.notebooks as nb

    def fake_setup(namespace):
        calls.append(sorted(namespace))
        raise RuntimeError("stop after the set-up")

    monkeypatch.setattr(nb, "setup", fake_setup)
    with pytest.raises(RuntimeError, match="stop after the set-up"):
        run_notebook(path)
    assert len(calls) == 1
