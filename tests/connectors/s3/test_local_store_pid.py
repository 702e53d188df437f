"""The local store's pid file and settings, without starting it."""

from __future__ import annotations

import os
from pathlib import Path

from connectors.s3.local_store import LocalS3Store, StoreConfig


def test_a_pid_file_naming_another_program_or_nothing_is_stale(tmp_path: Path) -> None:
    store = LocalS3Store(StoreConfig(data_dir=tmp_path, port=1))
    assert store.pid() is None  # no file
    store.config.pid_file.write_text(f"{os.getpid()}\n")  # this pytest, not S3Proxy
    assert store.pid() is None
    store.config.pid_file.write_text("not a pid\n")
    assert store.pid() is None
    assert not store.is_running()
    store.stop()  # a stale file is removed, nothing is signalled
    assert not store.config.pid_file.exists()


def test_the_store_listens_on_loopback_only() -> None:
    props = StoreConfig().properties()
    assert "s3proxy.endpoint=http://127.0.0.1:9000\n" in props
    assert StoreConfig().settings().endpoint == "http://127.0.0.1:9000"
