"""The speculation cells' protocol (no Spark): where a speculative copy cannot run the cell is
not applicable, and a cell in which no second attempt reached the straggler's point proves
nothing (it would otherwise pass as ``precise`` with the straggler alone)."""

from __future__ import annotations

from pathlib import Path

import pytest

from spark_ext.config import CONF_DIR
from spark_ext.crash import declare
from spark_ext.jobrun import JobRun
from spark_ext.recovery import FaultCell, FaultClass, FaultNotApplicable, FaultNotFired
from spark_ext.recovery.speculation import (
    assert_speculated,
    no_speculative_copy,
    speculation_profile,
)

STAGED = declare("specfake.1.staged", "executor", "speculation fake: task staged its rows")
CELL = FaultCell(FaultClass.SPECULATION, STAGED, 1, seconds=5.0, partition=0)


@pytest.mark.parametrize(
    ("master", "why"),
    [
        ("local", "local master"),
        ("local[2,2]", "local master"),
        ("local[*]", "local master"),
        ("local-cluster[2,1,1024]", "one host"),
        ("spark://host:7077", None),
        ("yarn", None),
    ],
)
def test_a_speculative_copy_needs_executors_on_two_hosts(master: str, why: str | None) -> None:
    got = no_speculative_copy(master)
    assert got is None if why is None else why in (got or "")


def test_a_cluster_profile_speculates_and_the_local_one_is_not_applicable(tmp_path: Path):
    cluster = tmp_path / "cluster.toml"
    text = (CONF_DIR / "faults.toml").read_text()
    cluster.write_text(text.replace('master = "local[2,2]"', 'master = "spark://host:7077"'))
    path = Path(speculation_profile(str(cluster), tmp_path / "spec.toml"))
    assert '"spark.speculation" = "true"' in path.read_text()
    with pytest.raises(FaultNotApplicable, match="local master"):
        speculation_profile("faults", tmp_path / "local.toml")


def step(attempt: int, batch: int = 1) -> dict[str, object]:
    return {"point": STAGED.name, "kind": "reached", "batch": batch, "attempt": attempt}


def test_a_speculation_cell_without_a_second_attempt_at_the_point_proves_nothing() -> None:
    alone = JobRun(0, 1.0, "", (), (step(0), step(0, batch=2), step(1, batch=2)))
    with pytest.raises(FaultNotFired, match="no second attempt"):
        assert_speculated("fake", CELL, alone)
    assert_speculated("fake", CELL, JobRun(0, 1.0, "", (), (step(0), step(1))))
