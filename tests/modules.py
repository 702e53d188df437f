"""The project's modules, walked once for the tests that read the source (layers, public API)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple

from spark_ext.jobrun import REPO

#: The repository's packages, bottom layer first (docs/design.md, "Layers").
PACKAGES = ("spark_ext", "connectors", "jobs")


class Module(NamedTuple):
    """A source file and its dotted name (a package's ``__init__.py`` is the package)."""

    name: str
    path: Path

    @property
    def package(self) -> str:
        """The package a relative import of this module starts from."""
        return self.name if self.path.name == "__init__.py" else self.name.rpartition(".")[0]


def project_modules(packages: tuple[str, ...] = PACKAGES) -> Iterator[Module]:
    """Every ``.py`` file under ``packages``, in path order."""
    for top in packages:
        for path in sorted((REPO / top).rglob("*.py")):
            name = ".".join(path.relative_to(REPO).with_suffix("").parts)
            yield Module(name.removesuffix(".__init__"), path)
