"""Fixtures of the recovery tests: one harness per test run, its report written at the end;
the in-memory case of the tests with a fake runner; harnesses whose runs write to the local S3
store (:func:`store_harness`)."""

from __future__ import annotations

import importlib
import time
import traceback
import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from connectors.kafka.local_broker import private_broker
from spark_ext import storage
from spark_ext.jobrun import JobRun
from spark_ext.recovery import (
    HarnessContext,
    RecoveryCase,
    RecoveryHarness,
    RecoveryResult,
    RunSlot,
    format_table,
    write_report,
)
from tests.connectors.s3.conftest import s3_settings, s3_store  # noqa: F401 (fixtures)


def store_harness(
    request: pytest.FixtureRequest, workdir: Path, bootstrap: str, **kwargs: Any
) -> RecoveryHarness:
    """A harness (``profile="test"``, ``kwargs``) whose runs write under a prefix of their own
    in the local S3 store's bucket, deleted when ``request``'s scope ends."""
    settings = request.getfixturevalue("s3_settings")
    root = f"s3a://{request.getfixturevalue('s3_store').bucket}/tests/{uuid.uuid4().hex[:12]}"
    request.addfinalizer(lambda: storage.delete(root, settings))
    return RecoveryHarness(
        workdir, bootstrap, profile="test", out_root=root, storage=settings, **kwargs
    )


def in_process(module: str, args: Sequence[str] = (), **kwargs: Any) -> JobRun:
    """Run a job's ``main(args)`` in this process, on its running SparkSession (clean runs
    only: another profile's settings are ignored)."""
    if kwargs.get("fault") or kwargs.get("kill_after_s") is not None:
        raise ValueError("in_process runs clean runs only")
    start = time.monotonic()
    try:
        code = importlib.import_module(module).main(list(args))
    except Exception:
        return JobRun(1, time.monotonic() - start, traceback.format_exc())
    return JobRun(int(code or 0), time.monotonic() - start, "")


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

    Clean runs run in this process on the shared session (``test`` profile too), before the
    killed run; the runs that are killed and restarted are separate processes, as they must be.
    """
    yield RecoveryHarness(
        tmp_path_factory.mktemp("recovery"),
        kafka_bootstrap,
        profile="test",
        clean_runner=in_process,
        parallel=False,
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
