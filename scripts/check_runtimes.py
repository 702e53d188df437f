"""Is the pinned set (constraints.txt) installable on Python 3.12 and 3.13? Asked of the package
index, without those interpreters (README, "Install and runtimes"): each pin has a wheel for the
version, and the dependencies each declares there are pinned inside their ranges.

Usage: python scripts/check_runtimes.py [3.12 3.13]  (exit 1 on a failure; network: the index)
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import tempfile
import tomllib
from importlib.metadata import distribution
from pathlib import Path

from packaging.markers import default_environment
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet

ROOT = Path(__file__).resolve().parent.parent
SOURCE_ONLY = {"pyspark"}  # no wheel on the index: checked by the installed copy's metadata


def normal(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def pins() -> dict[str, str]:
    lines = (ROOT / "constraints.txt").read_text().splitlines()
    pairs = (line.split("==") for line in lines if line and not line.startswith("#"))
    return {normal(name): version for name, version in pairs}


def resolve(version: str, pinned: dict[str, str]) -> dict[str, list[str]]:
    """Each pin's wheel file and ``Requires-Dist`` for Python ``version``, from pip's report."""
    with tempfile.TemporaryDirectory() as tmp:
        requirements = Path(tmp) / "pins.txt"
        requirements.write_text(
            "".join(f"{n}=={v}\n" for n, v in pinned.items() if n not in SOURCE_ONLY)
        )
        report = Path(tmp) / "report.json"
        cmd = [sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed",
               "--no-deps", "--only-binary=:all:", "--python-version", version,
               "--target", str(Path(tmp) / "t"), "--report", str(report), "-q",
               "-r", str(requirements)]  # fmt: skip
        if subprocess.run(cmd).returncode != 0:
            return {}  # pip said which pin has no wheel for this version
        items = json.loads(report.read_text())["install"]
    found = {}
    for item in items:
        wheel = item["download_info"]["url"].rsplit("/", 1)[1]
        found[normal(item["metadata"]["name"])] = [
            wheel,
            *item["metadata"].get("requires_dist", []),
        ]
    for name in SOURCE_ONLY:
        meta = distribution(name).metadata
        wheel_tag = distribution(name).read_text("WHEEL") or ""
        assert "py3-none-any" in wheel_tag, f"{name} is not pure Python"
        assert version in SpecifierSet(meta["Requires-Python"] or ""), f"{name}: {version}"
        found[name] = [f"{name} (source, pure Python)", *(meta.get_all("Requires-Dist") or [])]
    return found


def check(version: str) -> list[str]:
    """What fails for Python ``version`` (nothing: the pins install there as a closed set)."""
    pinned = pins()
    found = resolve(version, pinned)
    if not found:
        return [f"pip resolves no wheel set for {version} (its error above)"]
    problems = [f"{n}: no wheel for {version}" for n in pinned if n not in found]
    env = {**default_environment(), "python_version": version, "python_full_version": version}
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    wanted = [(d, "") for ds in project["optional-dependencies"].values() for d in ds]
    wanted += [(d, "") for d in project["dependencies"]]
    wanted += [(d, n) for n, (_, *deps) in found.items() for d in deps]
    for text, owner in wanted:
        dep = Requirement(text)
        if dep.marker is not None and not dep.marker.evaluate({**env, "extra": ""}):
            continue
        name = normal(dep.name)
        if name == "spark-ext":
            continue
        if name not in pinned:
            problems.append(f"{owner or 'pyproject.toml'} needs {dep} on {version}: not pinned")
        elif not dep.specifier.contains(pinned[name], prereleases=True):
            problems.append(f"{owner or 'pyproject.toml'} needs {dep}, pinned {pinned[name]}")
    for name, (wheel, *_) in sorted(found.items()):
        print(f"  {version}  {name}=={pinned[name]}  {wheel}")
    return problems


def main(argv: list[str]) -> int:
    failed = False
    for version in argv or ["3.12", "3.13"]:
        problems = check(version)
        print(f"Python {version}: " + ("; ".join(problems) if problems else "every pin resolves"))
        failed |= bool(problems)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
