"""The wheel's layout: ``connectors/`` and ``jobs/`` ship as ``spark_ext.connectors`` and
``spark_ext.jobs``, their imports and module-name strings rewritten as they are built
(docs/design.md, "Public surface and packaging"). Everything else is in pyproject.toml.
"""

from __future__ import annotations

import re
from pathlib import Path

from setuptools import find_packages, setup
from setuptools.command.build_py import build_py

#: The checkout's top-level packages that the wheel ships under ``spark_ext``.
BUNDLED = ("connectors", "jobs")
_NAMES = "|".join(BUNDLED)
#: ``from connectors.x import y`` / ``import jobs.x``, at the start of a line.
_IMPORT = re.compile(rf"^(\s*)(from|import)(\s+)({_NAMES})(?=[.\s])", re.MULTILINE)
#: A string literal (plain or f-string) that starts with a bundled module's dotted name.
_STRING = re.compile(rf"""(?<![\w.])(f?)(["'])({_NAMES})\.""")


def namespaced(source: str) -> str:
    """``source`` with its imports of, and module names in, the bundled packages under
    ``spark_ext.``."""
    if re.search(rf"^\s*import\s+({_NAMES})\b(?!(\.\w+)+\s+as\b)", source, re.MULTILINE):
        # `import jobs.x` binds `jobs`: the rewrite would bind `spark_ext` instead.
        raise ValueError("write `from jobs import x` (or `import jobs.x as x`) in bundled code")
    source = _IMPORT.sub(r"\1\2\3spark_ext.\4", source)
    return _STRING.sub(r"\1\2spark_ext.\3.", source)


def packages() -> tuple[list[str], dict[str, str]]:
    """Every package of the wheel, and where each bundled one is in the checkout."""
    core = find_packages(include=["spark_ext", "spark_ext.*"])
    bundled = find_packages(include=[*BUNDLED, *(f"{name}.*" for name in BUNDLED)])
    return core + [f"spark_ext.{p}" for p in bundled], {f"spark_ext.{n}": n for n in BUNDLED}


class NamespacedBuildPy(build_py):
    """Copies the modules as usual, then rewrites the bundled ones (:func:`namespaced`)."""

    def build_module(self, module, module_file, package):  # type: ignore[no-untyped-def]
        written = super().build_module(module, module_file, package)
        name = package if isinstance(package, str) else ".".join(package)
        bundled = name.split(".")[:2] in [["spark_ext", b] for b in BUNDLED]
        if bundled and not getattr(self, "editable_mode", False):
            target = Path(written[0])
            target.write_text(namespaced(target.read_text()))
        return written


PACKAGES, PACKAGE_DIR = packages()
setup(packages=PACKAGES, package_dir=PACKAGE_DIR, cmdclass={"build_py": NamespacedBuildPy})
