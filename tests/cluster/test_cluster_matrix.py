"""``spark-ext matrix --cluster isolated --storage s3`` as a user runs it (heavy): the CLI starts
an isolated cluster with its store, every run of the two-phase Delta job's cells goes there, the
cluster is gone afterwards (docs/design.md, "Isolated hosts")."""

from __future__ import annotations

import pytest

from jobs import cli
from spark_ext.recovery import network

pytestmark = [pytest.mark.integration, pytest.mark.heavy]


@pytest.mark.timeout(2400)  # seven job runs and a host restart: 8.5 min at load 14
def test_the_cluster_matrix_gives_the_delta_two_phase_cells_as_declared(tmp_path, capsys):
    faults = "kill,task-raise,host-loss,partition"
    args = ["matrix", "exactly_once_delta", "--cluster", "isolated", "--storage", "s3"]
    args += ["--faults", faults, "--workdir", str(tmp_path / "w"), "--report", str(tmp_path / "r")]
    assert cli.main(args) == 0, capsys.readouterr()
    table = capsys.readouterr().out
    row = next(line for line in table.splitlines() if line.startswith("exactly_once_delta"))
    assert row.split()[1:] == ["precise"] * 4, table
    assert not network.hosts(), "the CLI stopped its cluster"
