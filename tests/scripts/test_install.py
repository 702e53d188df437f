"""The project installs like any package: ``pip install .`` into a fresh venv, then ``spark-ext
list`` works from another folder (the jobs come from the installed ``jobs`` package, not from a
checkout on ``sys.path``)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from spark_ext.jobrun import REPO

#: What the wheel is built from (copied, so the build leaves nothing in the shared checkout).
SOURCES = ("pyproject.toml", "README.md", "spark_ext", "connectors", "jobs", "conf")


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Path:
    """A venv with the project installed (``--no-deps``: the dependencies are this venv's,
    reached through a ``.pth`` file, so nothing as big as pyspark is downloaded again)."""
    root = tmp_path_factory.mktemp("install")
    src = root / "src"
    src.mkdir()
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info")
    for name in SOURCES:
        path = REPO / name
        if path.is_dir():
            shutil.copytree(path, src / name, ignore=ignore)
        else:
            shutil.copy2(path, src / name)
    venv = root / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    site = Path(
        subprocess.run(
            [
                str(venv / "bin" / "python"),
                "-c",
                "import sysconfig;print(sysconfig.get_paths()['purelib'])",
            ],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    )
    (site / "_dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    subprocess.run(
        [str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "--no-deps", str(src)],
        check=True,
        cwd=root,
        env=_clean_env(),
        timeout=600,
    )
    return venv


def _clean_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}


def run_installed(installed: Path, cwd: Path, program: str, *args: str) -> str:
    """Run ``program`` from the venv's ``bin`` in ``cwd`` with no checkout on the path; its
    output (it must exit 0)."""
    out = subprocess.run(
        [str(installed / "bin" / program), *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        env=_clean_env(),
        timeout=300,
    )
    assert out.returncode == 0, out.stderr
    return out.stdout


def test_spark_ext_list_works_from_another_folder_after_pip_install(installed, tmp_path):
    listed = run_installed(installed, tmp_path, "spark-ext", "list")
    for job in ("exactly_once_delta", "ordering_dedup", "dedup_delta"):
        assert job in listed


def test_installed_packages_are_the_ones_imported_and_typed(installed, tmp_path):
    code = (
        "import connectors, jobs.registry, spark_ext, spark_ext.dedup, spark_ext.ordering, "
        "connectors.delta.dedup_sink, pathlib; "
        "print(pathlib.Path(spark_ext.__file__).parent); print(jobs.registry.__file__); "
        "print(connectors.__file__)"
    )
    out = run_installed(installed, tmp_path, "python", "-c", code)
    package, registry, connectors = (Path(line) for line in out.split())
    for path in (package, registry, connectors):
        assert path.is_relative_to(installed), f"{path} is not the installed copy"
    assert (package / "py.typed").is_file()


def test_installed_project_finds_its_profiles_and_keeps_data_in_the_working_folder(
    installed, tmp_path
):
    code = (
        "from spark_ext.config import load_profile; p = load_profile('local'); "
        "print(p.name); print(p.paths.resolved_data_root())"
    )
    name, data_root = run_installed(installed, tmp_path, "python", "-c", code).split()
    assert name == "local"
    assert Path(data_root) == tmp_path / "var" / "data"
