"""The suite's slowest files run first on xdist's workers (tests/conftest.py, RUN_FIRST)."""

from __future__ import annotations

from spark_ext.jobrun import REPO
from tests.conftest import RUN_FIRST


def test_every_file_run_first_exists_and_the_test_command_keeps_their_order() -> None:
    missing = [path for path in RUN_FIRST if not (REPO / path).is_file()]
    assert not missing, f"renamed or removed: {missing}; update RUN_FIRST"
    assert len(set(RUN_FIRST)) == len(RUN_FIRST)
    assert "--dist loadfile --no-loadscope-reorder" in (REPO / "scripts/test.sh").read_text()
