"""The fault matrix's Kafka cells on a secured listener (heavy): the jobs with a Kafka sink and
the Kafka->Delta job ``exactly_once_delta`` under every fault class this machine injects, every
other job killed and restarted, their runs' profiles on a private broker's SCRAM listener, the
broker faults on a secured broker of the harness's own; each cell gets the outcome its job
declares (docs/design.md, "Kafka clients"). A subset runs alone (``-k``): the fixture runs the
selected cells only.

Not here: the speculation cells with a straggler need executors on two hosts, the host faults
the isolated hosts (``tests/spark_ext/recovery/test_fault_matrix.py`` says where each runs).
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from jobs import registry
from spark_ext.recovery import FaultClass, FaultNotApplicable, RecoveryHarness
from spark_ext.recovery.matrix import CellStatus, MatrixCell, format_matrix, run_plan
from tests.connectors.kafka.secured_kafka import (
    PASSWORD,
    PASSWORD_ENV,
    SecuredBrokerConfig,
    SecuredKafka,
    secured_broker,
    secured_kafka,
)

#: The fixture runs every cell in the first test's setup (its own timeout guard).
HEAVY = [pytest.mark.heavy, pytest.mark.matrix, pytest.mark.crash, pytest.mark.timeout(5400)]

#: The jobs with a Kafka sink, and the Kafka->Delta job: every cell this machine injects.
KAFKA_JOBS = (
    "exactly_once_kafka",
    "exactly_once_kafka_idempotent",
    "spark_kafka_sink",
    "tracker_two_queries",
    "exactly_once_delta",
)
#: The fault classes injected on one machine with a local master.
FAULTS = (
    FaultClass.KILL,
    FaultClass.TASK_RAISE,
    FaultClass.DRIVER_RAISE,
    FaultClass.CHECKPOINT_RESET,
    FaultClass.BROKER_PAUSE,
    FaultClass.BROKER_RESTART,
    FaultClass.OUTPUT_TRIM,
    FaultClass.TXN_RETENTION,
    FaultClass.LOG_RETENTION,
)
#: Those cells, then every other job's kill cell (each reads its input over the listener).
CELLS = [
    (job, fault)
    for job in sorted(registry.names(), key=lambda j: j not in KAFKA_JOBS)
    for fault in (FAULTS if job in KAFKA_JOBS else (FaultClass.KILL,))
    if registry.get(job).cell(fault) is not None
]


@pytest.fixture(scope="module")
def matrix(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> dict[tuple[str, FaultClass], MatrixCell]:
    """The selected cells of :data:`CELLS`, run once (two jobs at a time) on the SCRAM
    listener; the jobs read its password from the environment, as a profile in git would."""
    plan: dict[str, list[FaultClass]] = {}
    for item in request.session.items:
        if item.module is request.module and hasattr(item, "callspec"):
            plan.setdefault(item.callspec.params["job"], []).append(item.callspec.params["fault"])
    folder = tmp_path_factory.mktemp("secured-matrix")
    with pytest.MonkeyPatch.context() as env, secured_kafka(folder / "broker") as secured:
        env.setenv(PASSWORD_ENV, PASSWORD)
        harness = RecoveryHarness(
            folder / "runs",
            secured.scram,
            profile=str(secured.profile(folder, "scram")),
            fault_profile=str(secured.profile(folder, "scram", base="faults")),
            timeout_s=600,
            brokers=secured_broker,
        )
        started = time.monotonic()
        cells = run_plan(harness, [(registry.get(j), f) for j, f in plan.items()], 2)
        print(f"\n{format_matrix(cells)}\nsecured matrix: {time.monotonic() - started:.0f} s")
    return {(c.job, c.fault): c for c in cells}


@pytest.mark.parametrize(
    ("job", "fault"), [pytest.param(*c, id=f"{c[0]}-{c[1]}", marks=HEAVY) for c in CELLS]
)
def test_kafka_cell_on_the_scram_listener_gets_its_declared_outcome(
    matrix, job: str, fault: FaultClass
):
    cell = matrix[(job, fault)]
    assert cell.status is not CellStatus.NOT_APPLICABLE, f"n/a: {cell.error}"
    assert cell.status is not CellStatus.ERROR, cell.error
    for r in cell.results:
        assert r.as_expected, f"{r.label} under {fault}: {r.observed}, declared {r.expected}"


class _PlaintextBroker:
    """A broker factory's broker that is never started: its bootstrap has no client properties."""

    def __init__(self, data_dir: Path, port: int) -> None:
        self.bootstrap = f"127.0.0.1:{port}"

    def start(self) -> str:
        return self.bootstrap

    def stop(self, timeout: float = 0) -> None:
        pass

    pause = resume = kill = stop


def test_broker_cells_of_a_secured_profile_on_a_plaintext_harness_broker_are_not_applicable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(PASSWORD_ENV, PASSWORD)
    # what `spark-ext matrix --fault-profile <secured>` does: its own brokers are plaintext
    secured = SecuredKafka(SecuredBrokerConfig(scram_port=19999))
    harness = RecoveryHarness(
        tmp_path,
        secured.scram,
        profile=str(secured.profile(tmp_path, "scram")),
        fault_profile=str(secured.profile(tmp_path, "scram", base="faults")),
        brokers=_PlaintextBroker,
    )
    case = registry.get("exactly_once_kafka")
    with pytest.raises(FaultNotApplicable, match=r"SASL_PLAINTEXT.* is plaintext"):
        harness.run_cell(case, FaultClass.BROKER_PAUSE)
