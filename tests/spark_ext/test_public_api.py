"""The public surface: names importable from ``spark_ext``, ``__all__`` that tells the truth."""

from __future__ import annotations

import ast
import importlib
import subprocess
import sys
from pathlib import Path

import pytest

import spark_ext
from tests.modules import project_modules

ROOT = Path(spark_ext.__file__).resolve().parent

#: Public modules whose ``__all__`` is checked here (those of the dedup/ordering/API issue).
MODULES = [
    "spark_ext",
    "spark_ext.hashing",
    "spark_ext.dedup",
    *[f"spark_ext.dedup.{p.stem}" for p in sorted((ROOT / "dedup").glob("[a-z]*.py"))],
    "spark_ext.ordering",
    *[f"spark_ext.ordering.{p.stem}" for p in sorted((ROOT / "ordering").glob("[a-z]*.py"))],
    "spark_ext.config",
    "spark_ext.session",
    "spark_ext.metrics",
    "spark_ext.state_inspect",
    "connectors.delta.dedup_sink",
    "connectors.delta.dedup_staging",
]


@pytest.mark.parametrize("name", MODULES)
def test_every_name_in_all_exists(name):
    module = importlib.import_module(name)
    assert module.__all__, f"{name} declares no public names"
    missing = [n for n in module.__all__ if not hasattr(module, n)]
    assert missing == []


def test_top_level_names_come_from_their_packages():
    from spark_ext.dedup import DedupConfig
    from spark_ext.ordering import order_and_fold

    assert spark_ext.DedupConfig is DedupConfig
    assert spark_ext.order_and_fold is order_and_fold
    with pytest.raises(AttributeError):
        _ = spark_ext.no_such_name


def test_importing_spark_ext_starts_no_spark_and_loads_no_package():
    code = "import sys, spark_ext; print(sorted(m for m in sys.modules if m.startswith(('pyspark', 'spark_ext.'))))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_package_is_typed():
    import tomllib

    # The marker exists and the wheel ships it (PEP 561): both, or type checkers see nothing.
    pyproject = tomllib.loads((ROOT.parent / "pyproject.toml").read_text())
    assert "py.typed" in pyproject["tool"]["setuptools"]["package-data"]["spark_ext"]
    assert (ROOT / "py.typed").is_file()


def test_every_module_declares_its_public_names_and_each_exists():
    """docs/design.md, "Public surface": every module of spark_ext and connectors declares
    ``__all__``, and every name in it is defined there (no stale entry after a move)."""
    missing, stale = [], []
    for module in project_modules(("spark_ext", "connectors")):
        tree = ast.parse(module.path.read_text())
        declared = [
            n
            for n in tree.body
            if (isinstance(n, ast.Assign) and getattr(n.targets[0], "id", None) == "__all__")
            or (isinstance(n, ast.AnnAssign) and getattr(n.target, "id", None) == "__all__")
        ]
        if not declared:
            missing.append(module.name)
            continue
        public = importlib.import_module(module.name)
        stale += [f"{module.name}.{n}" for n in public.__all__ if not hasattr(public, n)]
    assert not missing, f"modules without __all__: {missing}"
    assert not stale, f"__all__ names that do not exist: {stale}"


def test_help_of_spark_ext_maps_every_package_and_module():
    """``help(spark_ext)`` names each package of spark_ext and connectors and each flat module
    of spark_ext (a new one left off the map fails here)."""
    repo = ROOT.parent
    units = {f"spark_ext.{p.stem}" for p in ROOT.glob("[a-z]*.py")}
    units |= {f"spark_ext.{p.parent.name}" for p in ROOT.glob("[a-z]*/__init__.py")}
    units |= {f"connectors.{p.parent.name}" for p in (repo / "connectors").glob("*/__init__.py")}
    units |= {f"connectors.{p.stem}" for p in (repo / "connectors").glob("[a-z]*.py")}
    unmapped = sorted(u for u in units if u not in (spark_ext.__doc__ or ""))
    assert unmapped == []
