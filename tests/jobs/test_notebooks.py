"""Every Databricks-style notebook in ``jobs/notebooks`` runs top to bottom locally.

A notebook is a ``.py`` file in Databricks' source format: first line
``# Databricks notebook source``, cells separated by ``# COMMAND ----------``, text cells as
``# MAGIC %md`` lines. It installs the project (``%pip install --no-deps``: the wheel and what a
runtime lacks, never the runtime's Spark), shares its set-up the Databricks way (``%run
./_setup``) and imports the project by the wheel's names; :func:`jobs.notebooks.run_notebook`
runs it here as Databricks would, following ``%run``. It builds (here: reuses) the SparkSession
and asserts the claims it walks through, so running it is the test.
"""

from __future__ import annotations

import ast
import re
import tomllib
from importlib.metadata import requires
from pathlib import Path

import pytest
from packaging.markers import default_environment
from packaging.requirements import Requirement

from jobs.notebooks import (
    HEADER,
    ROOT_PLACEHOLDER,
    NotebookSetupError,
    cells,
    check_root,
    run_notebook,
)
from spark_ext.jobrun import REPO

FOLDER = REPO / "jobs" / "notebooks"
NOTEBOOKS = sorted(FOLDER.glob("[0-9]*.py"))
SETUP = FOLDER / "_setup.py"
#: The install cell of every notebook (README, "Notebooks").
INSTALL = "# MAGIC %pip install --no-deps -r ./requirements.txt"
REQUIREMENTS = FOLDER / "requirements.txt"
#: What a Databricks runtime brings itself, which the install must leave alone.
#: What a Spark 4 runtime brings (protobuf: its pyspark's transformWithState needs it).
RUNTIME = {
    "pyspark",
    "delta-spark",
    "py4j",
    "pyarrow",
    "pandas",
    "numpy",
    "typing-extensions",
    "protobuf",
}

#: Notebooks that start job processes (the harness) and kill them: crash tests.
STARTS_JOBS = {"00_recovery_harness.py"}
#: The harness notebook runs a job clean, killed and restarted (1.5 min): heavy, as the full
#: fault matrix; in CI the harness runs those jobs in tests/spark_ext/recovery (the suite's budget).
HARNESS_RUNS = pytest.mark.heavy


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
    """Every notebook opens the same way: its text, the install, ``%run ./_setup``; it imports
    the project by the names the wheel installs."""
    parts = cells(path)
    assert parts[1] == INSTALL, "cell 2 installs the wheel, --no-deps"
    assert parts[2] == "# MAGIC %run ./_setup", "cell 3 runs the shared set-up"
    code = "\n".join(c for c in parts if not c.startswith("# MAGIC"))
    for needless in ("dbutils.widgets", "build_session", "127.0.0.1", "localhost", "/dbfs"):
        assert needless not in code, f"{needless} belongs to ./_setup"
    assert parts[-1].startswith('print("topics deleted:", cleanup())'), "the run cleans up"
    for source in (code, SETUP.read_text()):
        tops = {n.split(".")[0] for n in _imported(source)}
        assert not tops & {"connectors", "jobs"}, "the wheel has spark_ext.connectors/.jobs"


def _imported(source: str) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
    return names


def test_notebook_install_brings_the_wheel_and_what_a_runtime_lacks_never_spark():
    """``requirements.txt`` (installed ``--no-deps``): the wheel, then exact pins, the same as
    constraints.txt, closed under their dependencies, none of the runtime's own packages."""
    lines = [line for line in REQUIREMENTS.read_text().splitlines() if line and not line[0] == "#"]
    assert re.fullmatch(r"/Volumes/.+/spark_ext-[\d.]+-py3-none-any\.whl", lines[0])
    tested = dict(line.split("==") for line in (REPO / "constraints.txt").read_text().split()
                  if "==" in line)  # fmt: skip
    tested = {_normal(n): v for n, v in tested.items()}
    pinned = {_normal(n): v for n, v in (line.split("==") for line in lines[1:])}
    assert pinned.items() <= tested.items(), "pinned as constraints.txt"
    assert not pinned.keys() & RUNTIME
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    todo = [*project["dependencies"], *project["optional-dependencies"]["test"]]
    env, needed = default_environment(), set()
    while todo:  # the closure, from each installed package's metadata
        wanted = Requirement(todo.pop())
        name = _normal(wanted.name)
        if name in needed or name in RUNTIME:
            continue
        needed.add(name)
        for dep in map(Requirement, requires(name) or ()):
            extras = [{**env, "extra": e} for e in [*wanted.extras, ""]]
            if dep.marker is None or any(dep.marker.evaluate(e) for e in extras):
                todo.append(str(dep))
    assert needed == pinned.keys()


def _normal(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def test_runner_imports_the_wheels_names_as_the_checkouts_modules(tmp_path):
    notebook = tmp_path / "names.py"
    notebook.write_text(
        f"{HEADER}\n# MAGIC %md\n# MAGIC names\n\n# COMMAND ----------\n\n"
        "import connectors.kafka\nimport spark_ext.connectors.kafka as installed\n"
        "from spark_ext.jobs import registry\nimport jobs.registry\n"
        "assert installed is connectors.kafka and registry is jobs.registry\n"
    )
    run_notebook(notebook)


@pytest.mark.parametrize(
    ("root", "ok"),
    [
        ("/Volumes/main/default/spark_ext", True),
        ("dbfs:/tmp/spark_ext", False),
        ("/dbfs/tmp/spark_ext", False),
        ("tmp/spark_ext", False),
        ("/tmp/spark_ext", False),  # the driver's own disk
        (ROOT_PLACEHOLDER, False),
        ("", False),
    ],
)
def test_run_root_must_be_one_path_spark_and_python_read_alike(root: str, ok: bool):
    if ok:
        assert check_root(root) == Path(root)
    else:
        with pytest.raises(NotebookSetupError) as info:
            check_root(root)
        assert info.value.setting == "root"


class Widgets:
    """``dbutils.widgets`` as a workspace has it: ``text`` declares with a default, a value the
    user typed wins."""

    def __init__(self, typed):
        self.typed, self.defaults = dict(typed), {}

    def text(self, name, default, label=None):
        self.defaults[name] = default

    def get(self, name):
        return self.typed.get(name, self.defaults[name])


@pytest.mark.parametrize(
    ("typed", "refused"),
    [
        ({}, "bootstrap"),
        ({"bootstrap": "127.0.0.1:9092", "root": "/Volumes/c/s/v/x"}, "bootstrap"),
        ({"bootstrap": "b1:9092,localhost:9092", "root": "/Volumes/c/s/v/x"}, "bootstrap"),
        ({"bootstrap": "broker-1:9092"}, "root"),
        ({"bootstrap": "broker-1:9092", "root": "/dbfs/tmp/x"}, "root"),
        ({"bootstrap": "broker-1:9092,broker-2:9092", "root": "/Volumes/c/s/v/x"}, None),
    ],
)
def test_workspace_setup_requires_a_broker_and_a_volume(typed, refused):
    """No widget default names a broker or a volume: unset, the set-up names the widget."""
    from jobs.notebooks import setup

    class DbUtils:
        widgets = Widgets(typed)

    namespace = {"dbutils": DbUtils(), "spark": object(), "display": print}
    if refused:
        with pytest.raises(NotebookSetupError) as info:
            setup(namespace)
        assert info.value.setting == refused
    else:
        names = setup(namespace)
        assert names["BOOTSTRAP"] == typed["bootstrap"]
        assert names["ROOT"].parent == Path(typed["root"])
    assert DbUtils.widgets.defaults == {"bootstrap": "", "root": ROOT_PLACEHOLDER}


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
