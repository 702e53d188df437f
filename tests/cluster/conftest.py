"""An isolated cluster per test module: 2 worker hosts (network and mount namespaces on
a bridge, scripts/cluster.py ``--isolated``), its broker and S3 store on the bridge, stopped at the end and
by its watchdog should this process die first (docs/design.md, "Isolated hosts")."""

from __future__ import annotations

import fcntl
import importlib.util
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from jobs.isolated import CLUSTER, ClusterHosts, isolated_cluster

HOSTS = 2
#: Held by each module here while it runs: the isolated hosts' names and addresses are fixed
#: (spark_ext.recovery.network), so two test processes (pytest-xdist) take turns.
LOCK = Path("/tmp/spark-ext-isolated-hosts.lock")


@pytest.fixture(scope="module", autouse=True)
def one_isolated_cluster_at_a_time() -> Iterator[None]:
    with LOCK.open("w") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        yield


def load_script() -> Any:
    """scripts/cluster.py as a module (scripts/ is no package)."""
    spec = importlib.util.spec_from_file_location("cluster_script", CLUSTER)
    assert spec is not None and spec.loader is not None
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    return script


@pytest.fixture(scope="module")
def isolated(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ClusterHosts]:
    with isolated_cluster(tmp_path_factory.mktemp("isolated"), HOSTS) as hosts:
        yield hosts
