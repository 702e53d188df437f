"""An isolated cluster per test module: 2 worker hosts (network and mount namespaces on
a bridge, scripts/cluster.py ``--isolated``), its broker and S3 store on the bridge, stopped at the end and
by its watchdog should this process die first (docs/design.md, "Isolated hosts")."""

from __future__ import annotations

import fcntl
import importlib.util
import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from connectors.s3.local_store import StoreConfig
from spark_ext.jobrun import REPO
from spark_ext.recovery import network

CLUSTER = str(REPO / "scripts" / "cluster.py")
HOSTS = 2
#: Held by each module here while it runs: the isolated hosts' names and addresses are fixed
#: (spark_ext.recovery.network), so two test processes (pytest-xdist) take turns.
LOCK = Path("/tmp/spark-ext-isolated-hosts.lock")


@pytest.fixture(scope="module", autouse=True)
def one_isolated_cluster_at_a_time() -> Iterator[None]:
    with LOCK.open("w") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        yield


@dataclass(frozen=True)
class ClusterHosts:
    """The running isolated cluster, as :class:`spark_ext.recovery.host_faults.IsolatedHosts`."""

    folder: Path

    @property
    def profile(self) -> str:
        return str(self.folder / "isolated.toml")

    @property
    def shared(self) -> Path:
        return self.folder / "shared"

    @property
    def bootstrap(self) -> str:
        return f"{network.SERVICE_ADDRESS}:9092"

    @property
    def store(self) -> StoreConfig:
        return StoreConfig(data_dir=self.folder / "s3", host=network.SERVICE_ADDRESS)

    def restart(self, host: str) -> None:
        index = host.removeprefix(f"{network.PREFIX}-w")
        cluster("start-host", "--dir", str(self.folder), "--host", index)


def load_script() -> Any:
    """scripts/cluster.py as a module (scripts/ is no package)."""
    spec = importlib.util.spec_from_file_location("cluster_script", CLUSTER)
    assert spec is not None and spec.loader is not None
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    return script


def cluster(*args: str) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        [sys.executable, CLUSTER, *args], cwd=REPO, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done


@pytest.fixture(scope="module")
def isolated(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ClusterHosts]:
    folder = tmp_path_factory.mktemp("isolated")
    try:  # a partial start is stopped too
        cluster(
            "start",
            "--isolated",
            "--store",
            "--hosts",
            str(HOSTS),
            "--dir",
            str(folder),
            "--owner-pid",
            str(os.getpid()),
        )
        yield ClusterHosts(folder)
    finally:
        cluster("stop", "--dir", str(folder))
