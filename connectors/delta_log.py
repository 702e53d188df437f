"""What a Delta table's log says about the files in its folder: which ones a snapshot needs.

A file in the table folder may be deleted only if no snapshot a reader can still load
references it (docs/design.md invariant 6). That is more than the current snapshot: a file an
``OPTIMIZE`` or ``DELETE`` removed is still read by time travel to the versions before, until
``VACUUM`` deletes it after ``delta.deletedFileRetentionDuration``. delta-rs exposes only the
current snapshot's files, so this module reads the log itself: every ``add`` and ``remove``
path of every commit file and every checkpoint (classic, multi-part, V2 with sidecars) still in
``_delta_log``. Anything it cannot interpret makes it raise, never guess "unreferenced".

Local (or mounted) tables only, like the sinks that use it.

Example
-------
>>> "part-0.parquet" in referenced_files("/data/events")  # doctest: +SKIP
True
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from urllib.parse import unquote

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


def referenced_files(table: str | os.PathLike[str]) -> set[str]:
    """Relative paths of every file some loadable snapshot of ``table`` may reference.

    The union of ``add`` and ``remove`` (tombstone) paths of every commit and checkpoint file
    in ``_delta_log`` (and its ``_sidecars``). A file not in this set was never committed, or
    was removed so long ago that ``VACUUM`` may delete it too.
    """
    log_dir = Path(table) / LOG_DIR
    out: set[str] = set()
    for entry in sorted(log_dir.iterdir()):
        name = entry.name
        if entry.is_dir():
            if name == "_sidecars":
                for side in sorted(entry.iterdir()):
                    if side.suffix == ".parquet":
                        _paths_of_parquet(side, out)
            continue
        if name.endswith(".json") and name[:20].isdigit():
            _paths_of_json(entry, out)  # a commit, or a V2 checkpoint in JSON
        elif name.endswith(".parquet") and ".checkpoint" in name:
            _paths_of_parquet(entry, out)
    return out
