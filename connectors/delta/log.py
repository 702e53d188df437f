"""Which files in a Delta table's folder some loadable snapshot needs: every ``add`` and ``remove``
path of every commit and checkpoint (classic, multi-part, V2 with sidecars) in ``_delta_log``,
read from the log itself; what it cannot interpret raises, never "unreferenced" (docs/design.md,
"Delta sinks", deletion rule). Tables on a local path or on object storage (``spark_ext.storage``;
why not delta-rs: docs/design.md, "Object storage").
"""

from __future__ import annotations

import contextlib
import json
import logging
import threading
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING
from urllib.parse import unquote

from spark_ext import storage
from spark_ext.storage import Location, StorageSettings

if TYPE_CHECKING:
    import pyarrow.fs as pafs

__all__ = ["LOG_DIR", "delete_files", "list_files", "referenced_files", "remove_unreferenced"]

log = logging.getLogger(__name__)

LOG_DIR = "_delta_log"


def list_files(fs: pafs.FileSystem, path: str) -> list[pafs.FileInfo]:
    """The files (not folders) directly in ``path`` of ``fs``, by name; none if it is missing."""
    import pyarrow.fs as pafs

    infos = fs.get_file_info(pafs.FileSelector(path, allow_not_found=True))
    return sorted((i for i in infos if i.type == pafs.FileType.File), key=lambda i: i.base_name)


def delete_files(fs: pafs.FileSystem, path: str, names: Iterable[str]) -> None:
    """Delete ``names`` (relative to ``path`` of ``fs``); one already gone is no error."""
    for name in names:
        with contextlib.suppress(FileNotFoundError):
            fs.delete_file(f"{path}/{name}")


def _has_log(fs: pafs.FileSystem, path: str) -> bool:
    """Whether the table folder ``path`` of ``fs`` has a ``_delta_log``."""
    import pyarrow.fs as pafs

    return bool(fs.get_file_info(f"{path}/{LOG_DIR}").type == pafs.FileType.Directory)


def _paths_of_json(fs: pafs.FileSystem, path: str, out: set[str]) -> None:
    with fs.open_input_stream(path) as f:
        text = f.read().decode("utf-8")
    for line in text.splitlines():
        if not line.strip():
            continue
        action = json.loads(line)
        for kind in ("add", "remove"):
            if kind in action and action[kind].get("path"):
                out.add(unquote(action[kind]["path"]))


def _paths_of_parquet(fs: pafs.FileSystem, path: str, out: set[str]) -> None:
    import pyarrow.parquet as pq

    names = set(pq.read_schema(path, filesystem=fs).names)
    for kind in ("add", "remove"):
        if kind not in names:
            continue
        column = pq.read_table(path, columns=[kind], filesystem=fs).column(kind)
        for chunk in column.chunks:
            paths = chunk.field("path").to_pylist()
            out.update(unquote(p) for p in paths if p)


@dataclass
class _Walk:
    """What :func:`referenced_files` read of one table's log: the entries parsed, by name, with
    their (size, mtime), and the paths they reference."""

    parsed: dict[str, tuple[int, int]] = field(default_factory=dict)
    paths: set[str] = field(default_factory=set)


#: Per table location, what this process read of its log (docs/design.md, "Delta sinks", cost).
_WALKS: dict[str, _Walk] = {}
_WALKS_LOCK = threading.Lock()


def _entries(fs: pafs.FileSystem, log_dir: str) -> list[tuple[str, str, tuple[int, int]]]:
    """``(name, path, identity)`` of every commit, checkpoint and sidecar in the log."""
    out = []
    for info in list_files(fs, log_dir):
        name = info.base_name
        is_commit = name.endswith(".json") and name[:20].isdigit()
        if is_commit or (name.endswith(".parquet") and ".checkpoint" in name):
            out.append((name, info.path, (info.size, info.mtime_ns)))
    for info in list_files(fs, f"{log_dir}/_sidecars"):
        if info.base_name.endswith(".parquet"):
            key = f"_sidecars/{info.base_name}"
            out.append((key, info.path, (info.size, info.mtime_ns)))
    return out


def referenced_files(table: str | Location, settings: StorageSettings | None = None) -> set[str]:
    """Relative paths of every file some loadable snapshot of ``table`` may reference. A log
    entry is parsed once per process; one deleted since leaves its paths in the set (keeping
    more files), one seen with another size or mtime starts the walk over."""
    loc = Location.parse(table)
    fs, path = storage.filesystem(loc, settings)
    entries = _entries(fs, f"{path}/{LOG_DIR}")
    if not entries and not _has_log(fs, path):
        raise FileNotFoundError(f"{loc}/{LOG_DIR}: no Delta log")
    key = str(loc)
    with _WALKS_LOCK:
        walk = _WALKS.get(key) or _Walk()
        if any(walk.parsed.get(name, ident) != ident for name, _, ident in entries):
            walk = _Walk()
        for name, entry, ident in entries:
            if name in walk.parsed:
                continue
            if name.endswith(".json"):
                _paths_of_json(fs, entry, walk.paths)  # a commit, or a V2 checkpoint in JSON
            else:
                _paths_of_parquet(fs, entry, walk.paths)
            walk.parsed[name] = ident
        _WALKS[key] = walk
        return set(walk.paths)


def remove_unreferenced(
    table: str | Location, names: Iterable[str], settings: StorageSettings | None = None
) -> list[str]:
    """Delete those of ``names`` (paths relative to ``table``) that no loadable snapshot
    references (:func:`referenced_files`; a folder without a log: none); the names deleted."""
    fs, path = storage.filesystem(table, settings)
    doomed = sorted(
        set(names) - (referenced_files(table, settings) if _has_log(fs, path) else set())
    )
    delete_files(fs, path, doomed)
    return doomed
