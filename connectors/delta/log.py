"""Which files in a Delta table's folder some loadable snapshot needs: every ``add`` and ``remove``
path of every commit and checkpoint (classic, multi-part, V2 with sidecars) in ``_delta_log``,
read from the log itself; what it cannot interpret raises, never "unreferenced" (docs/design.md,
"Delta sinks", deletion rule). Local (or mounted) tables only.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import threading
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import unquote

__all__ = ["LOG_DIR", "referenced_files", "remove_unreferenced"]

log = logging.getLogger(__name__)

LOG_DIR = "_delta_log"


def _paths_of_json(path: Path, out: set[str]) -> None:
    with open(path, encoding="utf-8") as f:
        for line in f:
            if not line.strip():
                continue
            action = json.loads(line)
            for kind in ("add", "remove"):
                if kind in action and action[kind].get("path"):
                    out.add(unquote(action[kind]["path"]))


def _paths_of_parquet(path: Path, out: set[str]) -> None:
    import pyarrow.parquet as pq

    names = set(pq.read_schema(path).names)
    for kind in ("add", "remove"):
        if kind not in names:
            continue
        column = pq.read_table(path, columns=[kind]).column(kind)
        for chunk in column.chunks:
            paths = chunk.field("path").to_pylist()
            out.update(unquote(p) for p in paths if p)


@dataclass
class _Walk:
    """What :func:`referenced_files` read of one table's log: the entries parsed, by name, with
    their (inode, mtime), and the paths they reference."""

    parsed: dict[str, tuple[int, int]] = field(default_factory=dict)
    paths: set[str] = field(default_factory=set)


#: Per table folder, what this process read of its log (docs/design.md, "Delta sinks", cost).
_WALKS: dict[str, _Walk] = {}
_WALKS_LOCK = threading.Lock()


def _entries(log_dir: Path) -> list[tuple[str, Path, tuple[int, int]]]:
    """``(name, path, identity)`` of every commit, checkpoint and sidecar in the log."""
    out = []
    with os.scandir(log_dir) as it:
        for entry in sorted(it, key=lambda e: e.name):
            name = entry.name
            if entry.is_dir():
                if name == "_sidecars":
                    with os.scandir(entry.path) as sides:
                        for side in sorted(sides, key=lambda e: e.name):
                            if side.name.endswith(".parquet"):
                                st = side.stat()
                                key = f"_sidecars/{side.name}"
                                out.append((key, Path(side.path), (st.st_ino, st.st_mtime_ns)))
                continue
            is_commit = name.endswith(".json") and name[:20].isdigit()
            if is_commit or (name.endswith(".parquet") and ".checkpoint" in name):
                st = entry.stat()
                out.append((name, Path(entry.path), (st.st_ino, st.st_mtime_ns)))
    return out


def referenced_files(table: str | os.PathLike[str]) -> set[str]:
    """Relative paths of every file some loadable snapshot of ``table`` may reference. A log
    entry is parsed once per process; one deleted since leaves its paths in the set (keeping
    more files), one seen with another inode starts the walk over."""
    log_dir = Path(table) / LOG_DIR
    entries = _entries(log_dir)
    key = os.path.abspath(table)
    with _WALKS_LOCK:
        walk = _WALKS.get(key) or _Walk()
        if any(walk.parsed.get(name, ident) != ident for name, _, ident in entries):
            walk = _Walk()
        for name, path, ident in entries:
            if name in walk.parsed:
                continue
            if path.suffix == ".json":
                _paths_of_json(path, walk.paths)  # a commit, or a V2 checkpoint in JSON
            else:
                _paths_of_parquet(path, walk.paths)
            walk.parsed[name] = ident
        _WALKS[key] = walk
        return set(walk.paths)


def remove_unreferenced(table: str, names: Iterable[str]) -> list[str]:
    """Delete those of ``names`` (paths relative to ``table``) that no loadable snapshot
    references (:func:`referenced_files`; a folder without a log: none); the names deleted."""
    has_log = os.path.isdir(os.path.join(table, LOG_DIR))
    doomed = sorted(set(names) - (referenced_files(table) if has_log else set()))
    for name in doomed:
        with contextlib.suppress(FileNotFoundError):
            os.remove(os.path.join(table, name))
    return doomed
