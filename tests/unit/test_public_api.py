"""The public surface: names importable from ``spark_ext``, ``__all__`` that tells the truth."""

from __future__ import annotations

import importlib
import subprocess
import sys
from pathlib import Path

import pytest

import spark_ext

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
    assert (ROOT / "py.typed").is_file()
