"""Fixtures of the recovery tests: one harness per test run, its report written at the end."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from connectors.kafka.local_broker import private_broker
from spark_ext.recovery import (
    InProcessRunner,
    RecoveryHarness,
    RecoveryResult,
    format_table,
    write_report,
)


@pytest.fixture(scope="session")
def recovery_results() -> list[RecoveryResult]:
    """Every result the session's harness checks produced (for the final report)."""
    return []


@pytest.fixture(scope="session")
def recovery_report_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("recovery-report")


@pytest.fixture(scope="session")
def harness(
    spark,
    kafka_bootstrap: str,
    tmp_path_factory: pytest.TempPathFactory,
    recovery_results: list[RecoveryResult],
    recovery_report_dir: Path,
) -> Iterator[RecoveryHarness]:
    """A harness running jobs with the ``test`` profile; prints the table when the run ends.

    Clean runs run in this process on the shared session (``test`` profile too); the runs
    that are killed and restarted are separate processes, as they must be.
    """
    yield RecoveryHarness(
        tmp_path_factory.mktemp("recovery"),
        kafka_bootstrap,
        profile="test",
        clean_runner=InProcessRunner(),
        brokers=private_broker,
    )
    if recovery_results:
        index = write_report(recovery_results, recovery_report_dir)
        print(f"\n{format_table(recovery_results)}\nrecovery report: {index}")
