"""POSIX file steps (``flock``, fsync-ed appends and renames) of what lives in a local folder
only, which :func:`local_folder` checks (docs/design.md, "Tracker": local agent)."""

from __future__ import annotations

import fcntl
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from spark_ext.errors import ConfigError
from spark_ext.storage import Location

__all__ = [
    "append_synced",
    "file_lock",
    "fsync_dir",
    "listdir",
    "local_folder",
    "read_from",
    "replace_synced",
    "truncate",
]


def local_folder(folder: str | os.PathLike[str], setting: str, instead: str) -> Path:
    """``folder`` as a local path; a ``ConfigError`` naming ``setting`` and what to use
    ``instead`` for an object-store URI or another scheme."""
    try:
        loc = Location.parse(os.fspath(folder))
    except ConfigError as e:
        raise ConfigError(setting, f"{folder}: not a local folder ({e}); use {instead}") from e
    if loc.is_s3:
        raise ConfigError(
            setting, f"{folder} is on object storage, which has no file lock; use {instead}"
        )
    return Path(loc.path)


def listdir(folder: Path) -> list[str]:
    return os.listdir(folder)


def read_from(path: Path, offset: int = 0) -> bytes:
    """The bytes of ``path`` from ``offset`` on (``FileNotFoundError`` if it is missing)."""
    with open(path, "rb") as f:
        f.seek(offset)
        return f.read()


def truncate(path: Path, size: int) -> None:
    with open(path, "r+b") as f:
        f.truncate(size)


def append_synced(path: Path, data: bytes) -> int:
    """Append ``data`` to ``path`` and fsync it; the file's size after."""
    with open(path, "ab") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
        return f.tell()


def replace_synced(path: Path, data: bytes) -> None:
    """Write ``data`` to a temporary file, fsync it, rename it over ``path``, fsync the folder."""
    tmp = path.parent / f".{path.name}.tmp"
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    fsync_dir(path.parent)


def fsync_dir(folder: Path) -> None:
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


@contextmanager
def file_lock(path: Path) -> Iterator[None]:
    """An exclusive ``flock`` on ``path`` (closing the descriptor releases it)."""
    fd = os.open(path, os.O_CREAT | os.O_RDWR, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)
