"""An isolated cluster (``scripts/cluster.py start --isolated --store``) for the harness: started
and stopped around ``spark-ext matrix --cluster isolated`` and the cluster tests; docs/design.md,
"Isolated hosts"."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from connectors.s3.local_store import StoreConfig
from spark_ext.errors import ConfigError, SparkExtError
from spark_ext.jobrun import REPO
from spark_ext.recovery import network

CLUSTER = REPO / "scripts" / "cluster.py"


class ClusterCommandError(SparkExtError):
    """``scripts/cluster.py`` failed (its last lines say why)."""

    def __init__(self, command: str, output: str) -> None:
        super().__init__(f"scripts/cluster.py {command} failed: {output.strip()[-600:]}")


@dataclass(frozen=True)
class ClusterHosts:
    """The running isolated cluster of ``folder``, as
    :class:`spark_ext.recovery.host_faults.IsolatedHosts`."""

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


def cluster(*args: str, timeout_s: float = 300.0) -> str:
    """Run ``scripts/cluster.py args``; its output, or :class:`ClusterCommandError`."""
    cmd = [sys.executable, str(CLUSTER), *args]
    done = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=timeout_s)
    if done.returncode != 0:
        raise ClusterCommandError(args[0], done.stdout + done.stderr)
    return done.stdout


@contextmanager
def isolated_cluster(folder: Path, hosts: int = 2, store: bool = True) -> Iterator[ClusterHosts]:
    """An isolated cluster of ``hosts`` worker hosts (and an S3 store) in ``folder``, stopped
    however the block ends, and by its watchdog should this process die first."""
    if os.geteuid() != 0:
        raise ConfigError("--cluster isolated", "network namespaces need root: run as root")
    folder.mkdir(parents=True, exist_ok=True)
    args = ["--isolated", "--hosts", str(hosts), "--dir", str(folder)]
    try:  # a partial start is stopped too
        cluster("start", *args, *["--store"] * store, "--owner-pid", str(os.getpid()))
        yield ClusterHosts(folder)
    finally:
        cluster("stop", "--dir", str(folder))
