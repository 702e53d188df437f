"""The Delta sinks reach table and staging locations only through ``spark_ext.storage`` (issue
#26, item 2; docs/design.md, "Object storage"): no ``os``, ``open``, ``Path`` or ``shutil`` file
access in ``connectors/delta`` beyond the line allowed below."""

from __future__ import annotations

import re
from pathlib import Path

LOCAL_FILE_ACCESS = re.compile(r"\bos\.\w|\bshutil\b|(?<![\w.])open\(|\bPath\(")
#: (file, line) pairs allowed: a local table's folder made before delta-rs creates the table.
ALLOWED = {("table.py", "Path(path).mkdir(parents=True, exist_ok=True)")}


def test_delta_sinks_touch_locations_only_through_spark_ext_storage() -> None:
    root = Path(__file__).resolve().parents[3] / "connectors" / "delta"
    found = [
        f"{py.name}:{n}: {line.strip()}"
        for py in sorted(root.glob("*.py"))
        for n, line in enumerate(py.read_text(encoding="utf-8").splitlines(), 1)
        if LOCAL_FILE_ACCESS.search(line) and (py.name, line.strip()) not in ALLOWED
    ]
    assert not found, "local file access in connectors/delta:\n" + "\n".join(found)
