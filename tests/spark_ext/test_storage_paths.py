"""Tables, checkpoints and state are reached only through ``spark_ext.storage`` (issue #26,
item 2; docs/design.md, "Object storage"): no ``open``, ``Path``, ``os`` or ``shutil`` file
access in the modules that handle such a location, except where :data:`NOT_YET` says why."""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
#: The modules that read or write a table, checkpoint, catalog or state location.
SCOPE = (
    "connectors/delta",
    "connectors/sinks.py",
    "spark_ext/dedup",
    "spark_ext/sinks",
    "spark_ext/streaming",
    "spark_ext/state_inspect.py",
    "spark_ext/tracker",
    "spark_ext/local_files.py",
)
#: Modules still on local files, each with what is left (a fixed one left here fails too).
NOT_YET: dict[str, str] = {}
#: Modules local by design, each with the start check that refuses any other location.
LOCAL_ONLY = {
    "spark_ext/local_files.py": "the local tracking agent's flock/fsync/rename; local_folder "
    "refuses any other location at start (KafkaTrackingAgent on object storage)",
}
_ALLOWED_OS = {"os.environ.get", "os.environ.setdefault", "os.getpid", "os.fspath"}


def local_file_calls(path: Path) -> set[str]:
    """The names of the local file calls in ``path`` (``open``, ``Path``, ``os.*``, ``shutil.*``)."""
    calls = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if not isinstance(node, ast.Call):
            continue
        func, chain = node.func, []
        while isinstance(func, ast.Attribute):
            chain.append(func.attr)
            func = func.value
        if not isinstance(func, ast.Name):
            continue
        name = ".".join([func.id, *reversed(chain)])
        if (not chain and func.id in ("open", "Path")) or (
            chain and func.id in ("os", "shutil") and name not in _ALLOWED_OS
        ):
            calls.add(name)
    return calls


def scoped_files() -> list[Path]:
    found = []
    for entry in SCOPE:
        path = REPO / entry
        found += sorted(path.glob("*.py")) if path.is_dir() else [path]
    return found


def test_locations_are_reached_only_through_spark_ext_storage() -> None:
    found = {}
    for path in scoped_files():
        name = str(path.relative_to(REPO))
        calls = local_file_calls(path)
        if calls:
            found[name] = sorted(calls)
    assert {k: v for k, v in found.items() if k not in NOT_YET and k not in LOCAL_ONLY} == {}
    assert sorted(set(NOT_YET) - set(found)) == [], "fixed: take it off NOT_YET"
    assert sorted(set(LOCAL_ONLY) - set(found)) == [], "no local calls left: take it off"


def test_the_check_sees_each_kind_of_local_call(tmp_path: Path) -> None:
    module = tmp_path / "m.py"
    module.write_text(
        "import os, shutil\nfrom pathlib import Path\n"
        "open('x'); Path('y'); os.path.join('a'); os.remove('b'); shutil.rmtree('c')\n"
        "os.environ.get('HOME')\n"
    )
    assert local_file_calls(module) == {
        "open",
        "Path",
        "os.path.join",
        "os.remove",
        "shutil.rmtree",
    }
