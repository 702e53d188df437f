"""The layers of docs/design.md hold: imports point one way, and no import runs in a circle.

Two graphs, both acyclic. Units: a sub-package of ``spark_ext`` or ``connectors``
(``spark_ext.dedup``) or one of their flat modules (``spark_ext.crash``); and every module of
the repository's packages (``spark_ext``, ``connectors``, ``jobs``) on its own, so a circle
inside one package (two modules importing each other) fails too. Imports inside functions and
under ``TYPE_CHECKING`` count: a circle a reader has to untangle is one even when Python does not
trip over it.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable

from tests.modules import Module, project_modules

TOPS = ("spark_ext", "connectors")
#: The application layer inside spark_ext: none left (the CLI is jobs.cli; the harness gets
#: what reads topics or starts brokers from the layer above it).
APPLICATION: tuple[str, ...] = ()
#: Core modules that still import connectors, each with the issue that removes the import.
#: A new violation fails the test; so does a fixed one left on this list.
KNOWN_VIOLATIONS: dict[str, str] = {}


def imported(module: Module, known: Iterable[str] = ()) -> set[str]:
    """The dotted names ``module`` imports; ``from a import b`` names ``a.b`` if it is ``known``."""
    known = set(known)
    names: set[str] = set()
    for node in ast.walk(ast.parse(module.path.read_text())):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                parts = module.package.split(".")
                base = ".".join([*parts[: len(parts) - (node.level - 1)], node.module or ""])
            else:
                base = node.module or ""
            base = base.rstrip(".")
            names.add(base)
            names.update(f"{base}.{a.name}" for a in node.names if f"{base}.{a.name}" in known)
    return names


def unit(name: str) -> str | None:
    parts = name.split(".")
    if parts[0] not in TOPS:
        return None
    return ".".join(parts[:2]) if len(parts) > 1 else parts[0]


def circles(edges: dict[str, set[str]]) -> list[str]:
    """Each group of nodes that reach one another, with the edges that close it (sorted)."""

    def reachable(start: str) -> set[str]:
        seen: set[str] = set()
        todo = [start]
        while todo:
            for nxt in edges.get(todo.pop(), ()):
                if nxt not in seen:
                    seen.add(nxt)
                    todo.append(nxt)
        return seen

    reach = {node: reachable(node) for node in edges}
    groups = {
        frozenset(m for m in reach[node] if node in reach.get(m, ()))
        for node in edges
        if node in reach[node]
    }
    return sorted(
        " ; ".join(f"{a} -> {b}" for a in sorted(g) for b in sorted(edges[a] & g)) for g in groups
    )


def test_the_core_imports_neither_connectors_nor_jobs():
    violations = {}
    for module in project_modules(TOPS):
        if not module.name.startswith("spark_ext") or module.name.startswith(APPLICATION):
            continue
        above = sorted(n for n in imported(module) if n.split(".")[0] in ("connectors", "jobs"))
        if above:
            violations[module.name] = above
    assert set(violations) == set(KNOWN_VIOLATIONS), violations


def test_the_package_graph_is_acyclic():
    edges: dict[str, set[str]] = {}
    for module in project_modules(TOPS):
        source = unit(module.name)
        for name in imported(module):
            target = unit(name)
            if source and target and target != source:
                edges.setdefault(source, set()).add(target)
    found = circles(edges)
    assert not found, "\n".join(found)


def test_no_module_imports_in_a_circle():
    modules = list(project_modules())
    known = {m.name for m in modules}
    edges: dict[str, set[str]] = {}
    for module in modules:
        for name in imported(module, known):
            while name and name not in known:  # an attribute of a module: the module
                name = name.rpartition(".")[0]
            if name and name != module.name:
                edges.setdefault(module.name, set()).add(name)
    found = circles(edges)
    assert not found, "\n".join(found)


def test_a_circle_is_found_with_the_edges_that_close_it():
    edges = {"a": {"b"}, "b": {"c"}, "c": {"a", "d"}, "d": set(), "e": {"a"}}
    assert circles(edges) == ["a -> b ; b -> c ; c -> a"]
    assert circles({"a": {"b"}, "b": set()}) == []


#: Kafka client classes built only by :mod:`spark_ext.kafka_clients` (docs/design.md, "Kafka
#: clients"); confluent-kafka's take its configuration from ``kafka_clients.confluent_config``.
KAFKA_PYTHON_CLIENTS = {"KafkaConsumer", "KafkaProducer", "KafkaAdminClient"}
CONFLUENT_CLIENTS = {"Producer", "Consumer", "AdminClient"}


def _called_name(call: ast.Call) -> str:
    f = call.func
    return f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else ""


def kafka_clients_built_outside(source: str) -> list[str]:
    """The Kafka client constructions in ``source`` that bypass :mod:`spark_ext.kafka_clients`."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Call):
            continue
        name = _called_name(node)
        if name in KAFKA_PYTHON_CLIENTS:
            found.append(f"line {node.lineno}: {name}(...)")
        elif name in CONFLUENT_CLIENTS:
            arg = node.args[0] if node.args else None
            if not (isinstance(arg, ast.Call) and _called_name(arg) == "confluent_config"):
                found.append(f"line {node.lineno}: {name}(...) without confluent_config")
    return found


def test_every_kafka_client_is_built_by_kafka_clients():
    from spark_ext.jobrun import REPO

    sources = [m.path for m in project_modules() if m.name != "spark_ext.kafka_clients"]
    sources += sorted((REPO / "scripts").rglob("*.py"))
    bypass = {
        str(path.relative_to(REPO)): found
        for path in sources
        if (found := kafka_clients_built_outside(path.read_text()))
    }
    assert not bypass, bypass


def test_a_client_built_directly_is_found():
    source = (
        "from kafka import KafkaAdminClient\n"
        "from confluent_kafka import Producer\n"
        "a = KafkaAdminClient(bootstrap_servers='b')\n"
        "p = Producer({'bootstrap.servers': 'b'})\n"
        "q = Producer(kafka_clients.confluent_config('b', {}))\n"
    )
    assert kafka_clients_built_outside(source) == [
        "line 3: KafkaAdminClient(...)",
        "line 4: Producer(...) without confluent_config",
    ]
