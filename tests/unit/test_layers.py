"""The layers of docs/design.md hold: imports point one way, and the package graph is acyclic.

Units: a sub-package of ``spark_ext`` or ``connectors`` (``spark_ext.dedup``) or one of their
flat modules (``spark_ext.crash``); imports inside functions count too.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

from spark_ext.jobrun import REPO

TOPS = ("spark_ext", "connectors")
#: The application layer inside spark_ext: none left (the CLI is jobs.cli; the harness gets
#: what reads topics or starts brokers from the layer above it).
APPLICATION: tuple[str, ...] = ()
#: Core modules that still import connectors, each with the issue that removes the import.
#: A new violation fails the test; so does a fixed one left on this list.
KNOWN_VIOLATIONS: dict[str, str] = {}


def modules() -> Iterator[tuple[str, Path]]:
    for top in TOPS:
        for path in sorted((REPO / top).rglob("*.py")):
            yield ".".join(path.relative_to(REPO).with_suffix("").parts), path


def imported(module: str, path: Path) -> set[str]:
    package = module if path.name == "__init__.py" else module.rsplit(".", 1)[0]
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                names.add(".".join(base + ([node.module] if node.module else [])))
            elif node.module:
                names.add(node.module)
    return names


def unit(name: str) -> str | None:
    parts = name.split(".")
    if parts[0] not in TOPS:
        return None
    return ".".join(parts[:2]) if len(parts) > 1 else parts[0]


def test_the_core_imports_neither_connectors_nor_jobs():
    violations = {}
    for module, path in modules():
        if not module.startswith("spark_ext") or module.startswith(APPLICATION):
            continue
        above = sorted(
            n for n in imported(module, path) if n.split(".")[0] in ("connectors", "jobs")
        )
        if above:
            violations[module] = above
    assert set(violations) == set(KNOWN_VIOLATIONS), violations


def test_the_package_graph_is_acyclic():
    edges: dict[str, set[str]] = {}
    for module, path in modules():
        source = unit(module)
        for name in imported(module, path):
            target = unit(name)
            if source and target and target != source:
                edges.setdefault(source, set()).add(target)
    cycles = []

    def visit(node: str, trail: list[str]) -> None:
        for nxt in sorted(edges.get(node, ())):
            if nxt in trail:
                cycles.append([*trail[trail.index(nxt) :], nxt])
            elif len(trail) < 8:
                visit(nxt, [*trail, nxt])

    for start in sorted(edges):
        visit(start, [start])
    assert cycles == [], " ; ".join(" -> ".join(c) for c in cycles[:5])
