"""Fixtures of the recovery tests: one harness per test run, its report written at the end;
the in-memory case of the tests with a fake runner."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from connectors.kafka.local_broker import private_broker
from spark_ext.recovery import (
    HarnessContext,
    InProcessRunner,
    RecoveryCase,
    RecoveryHarness,
    RecoveryResult,
    RunSlot,
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


class InMemoryCase(RecoveryCase):
    """A case for a fake runner (no Spark): the job's last argument is the slot's output
    folder, and what it writes is kept in :attr:`written` by slot name."""

    def __init__(self) -> None:
        self.written: dict[str, list[dict[str, Any]]] = {}

    def prepare(self, ctx: HarnessContext) -> None:
        pass

    def job_args(self, ctx: HarnessContext, slot: RunSlot) -> list[str]:
        return ["--out", str(slot.out)]

    def read_output(self, ctx: HarnessContext, slot: RunSlot, output: str) -> list[dict[str, Any]]:
        return list(self.written.get(slot.name, []))
