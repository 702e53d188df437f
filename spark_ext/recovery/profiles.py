"""Profiles of the harness's runs (a derived one is a TOML file in the cell's folder, passed by
absolute path)."""

from __future__ import annotations

import json
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from spark_ext.config import load_profile, profile_path

__all__ = ["derive_profile", "resolve_profile"]


def resolve_profile(profile: str | Path) -> str:
    """A profile name as it is, a profile path made absolute against the caller's folder."""
    text = str(profile)
    return str(Path(text).resolve()) if text.endswith(".toml") else text


def _toml(table: Mapping[str, Any], prefix: str = "") -> list[str]:
    """``table`` as TOML lines: its values, then each sub-table under its ``[header]``."""
    lines = [
        f"{json.dumps(k)} = {json.dumps(v)}" for k, v in table.items() if not isinstance(v, dict)
    ]
    for key, sub in table.items():
        if isinstance(sub, dict):
            header = f"{prefix}{json.dumps(key)}"
            lines += [f"[{header}]", *_toml(sub, f"{header}.")]
    return lines


def derive_profile(
    base: str,
    dest: Path,
    spark_conf: Mapping[str, str] | None = None,
    bootstrap: str | None = None,
    settings: Mapping[str, Any] | None = None,
    sections: Mapping[str, Mapping[str, Any]] | None = None,
) -> Path:
    """Write ``dest``: the profile ``base`` with ``spark_conf`` added and, if given, the brokers,
    ``[spark]`` ``settings`` (``{"master": "local[1]"}``) and other ``sections``' settings
    (``{"storage": {"endpoint": ...}}``) replaced.

    Loaded once here, so a bad profile fails before any job.
    """
    raw = tomllib.loads(profile_path(base).read_text())
    spark = raw.setdefault("spark", {})
    spark.update(settings or {})
    spark["conf"] = {**spark.get("conf", {}), **(spark_conf or {})}
    if bootstrap:
        raw.setdefault("kafka", {})["bootstrap_servers"] = bootstrap
    for name, values in (sections or {}).items():
        raw[name] = {**raw.get(name, {}), **values}
    dest = Path(dest).resolve()
    dest.parent.mkdir(parents=True, exist_ok=True)
    dest.write_text("\n".join(_toml(raw)) + "\n")
    load_profile(dest)
    return dest
