"""The broker faults of the matrix: a broker of the harness's own (made by its ``brokers``
factory), paused or killed and restarted while the cell's point holds the job a second
(docs/design.md, "Fault points")."""

from __future__ import annotations

import dataclasses
import logging
import socket
import time
from collections.abc import Callable
from pathlib import Path
from typing import Protocol

from spark_ext import kafka_clients
from spark_ext.config import load_profile
from spark_ext.recovery.case import RecoveryCase, RecoveryResult
from spark_ext.recovery.errors import FaultNotApplicable
from spark_ext.recovery.faults import FaultCell, FaultClass
from spark_ext.recovery.profiles import derive_profile
from spark_ext.recovery.runs import JobRuns

__all__ = ["Broker", "BrokerFactory", "free_port", "run_broker_cell"]

log = logging.getLogger(__name__)


class Broker(Protocol):
    """A Kafka broker the harness may pause, kill and restart."""

    def start(self) -> str:
        """Start it; returns its bootstrap servers."""
        ...

    def stop(self, timeout: float = ...) -> None: ...
    def pause(self) -> None: ...
    def resume(self) -> None: ...
    def kill(self) -> None: ...


#: Makes a broker with its data in a folder, listening on a port (the next one: its controller).
BrokerFactory = Callable[[Path, int], Broker]
#: The first port tried for a broker of the harness's own.
BROKER_PORT = 19192


def _bindable(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_port(start: int) -> int:
    """The first port from ``start`` that can be bound, and the next one (the controller's)."""
    for port in range(start, start + 200, 2):
        if _bindable(port) and _bindable(port + 1):
            return port
    raise OSError(f"no free port pair from {start}")


def _check_secured(runs: JobRuns, case: RecoveryCase, cell: FaultCell, bootstrap: str) -> None:
    """:class:`FaultNotApplicable` when the fault profile's Kafka properties are for a secured
    listener and this process has none for the harness's broker (a plaintext one): the jobs
    could not reach it (docs/design.md, "Kafka clients")."""
    protocol = str(load_profile(runs.fault_profile).kafka.properties.get("security.protocol", ""))
    if (
        protocol.upper() not in ("", "PLAINTEXT")
        and not kafka_clients.properties_of(bootstrap).secured
    ):
        why = f"the profile's listener is {protocol}, the harness's own broker {bootstrap} is "
        raise FaultNotApplicable(case.name, str(cell.fault), why + "plaintext (brokers=)")


def run_broker_cell(
    runs: JobRuns, case: RecoveryCase, cell: FaultCell, brokers: BrokerFactory
) -> list[RecoveryResult]:
    """Run ``case`` clean and under ``cell`` (a broker fault) against a broker of its own,
    made by ``brokers`` on the first free port from :data:`BROKER_PORT`."""
    ctx = runs.context(case, f"{case.name}-{cell.fault}")
    broker = brokers(ctx.workdir / "broker", free_port(BROKER_PORT))
    try:
        bootstrap = broker.start()
        _check_secured(runs, case, cell, bootstrap)
        profile = derive_profile(
            runs.fault_profile, ctx.workdir / "broker-profile.toml", bootstrap=bootstrap
        )
        ctx = dataclasses.replace(ctx, bootstrap=bootstrap, profile=str(profile))
        case.prepare(ctx)
        clean = runs.clean_run(case, ctx, runner=runs.runner)
        slot = ctx.slot(str(cell.fault))

        def act(fired: list[dict[str, object]]) -> bool:
            if not fired:
                return False
            log.info("%s: %s fired; %s", case.name, cell.describe(), cell.fault)
            if cell.fault is FaultClass.BROKER_PAUSE:
                broker.pause()
                try:
                    time.sleep(cell.seconds)
                finally:
                    broker.resume()
            else:
                broker.kill()
                time.sleep(cell.seconds)
                broker.start()
            return True

        fault_log = ctx.workdir / f"{cell.fault}-faults.jsonl"
        faulted = runs.run_acting(case, cell, case.job_args(ctx, slot), fault_log, act)
        return runs.restart_and_compare(
            case, ctx, slot, clean, faulted, cell.fault, cell.describe()
        )
    finally:
        broker.stop(timeout=20)
