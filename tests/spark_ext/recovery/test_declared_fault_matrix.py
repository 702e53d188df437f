"""The fault matrix the guarantee jobs declare, pinned cell by cell (no Spark, no broker).

Each cell reads ``<fault point>@<batch> [#<partition>] [<seconds>s]: <output>=<outcome>, ...``
(``-``: the cell needs no point). Moving a job's cases between modules must leave this table as
it is; changing a job's declared point or expected outcome must change it here, on purpose.
"""

from __future__ import annotations

from jobs import registry
from spark_ext.recovery import FaultCell, FaultClass
from spark_ext.recovery.faults import Expectation

#: Per job (in registry order), per declared fault class: where it fires and what it must give.
MATRIX = {
    "at_most_once": {
        "kill": "at_most_once.after_offset_commit@1: events=gap",
        "driver-raise": "at_most_once.after_offset_commit@1: events=gap",
        "checkpoint-reset": "-: events=precise",
    },
    "at_least_once": {
        "kill": "at_least_once.after_write@1: events=rollback-repeating, ewma=rollback-divergent",
        "driver-raise": "at_least_once.after_write@1: events=rollback-repeating, ewma=rollback-divergent",
        "checkpoint-reset": "-: events=rollback-repeating, ewma=rollback-divergent",
    },
    "exactly_once_delta": {
        "kill": "delta2pc.3.committed@1: events=precise",
        "task-raise": "delta2pc.1.staged@1: events=precise",
        "driver-raise": "delta2pc.3.committed@1: events=precise",
        "checkpoint-reset": "-: events=SinkOwnerError",
        "speculation": "delta2pc.1.staged@1 #0 5s: events=precise",
        "broker-pause": "delta2pc.3.committed@0 130s: events=precise",
        "broker-restart": "delta2pc.3.committed@0 5s: events=precise",
        "txn-retention": "delta2pc.3.committed@1: events=DeltaTxnExpiredError",
        "log-retention": "delta2pc.3.committed@1: events=precise",
        "host-loss": "delta2pc.1.staged@1 #0: events=precise",
        "partition": "delta2pc.1.staged@1 #0 10s: events=precise",
        "slow-link": "delta2pc.1.staged@0 #0: events=precise",
        "store-errors": "delta2pc.2.before_commit@0 10s: events=precise",
        "driver-partition": "delta2pc.2.before_commit@1 10s: events=precise",
    },
    "exactly_once_delta_idempotent": {
        "kill": "delta_idem.3.written@1: events=precise",
        "driver-raise": "delta_idem.3.written@1: events=precise",
        "checkpoint-reset": "-: events=SinkOwnerError",
        "txn-retention": "delta_idem.3.written@1: events=DeltaTxnExpiredError",
        "log-retention": "delta_idem.3.written@1: events=precise",
        "store-errors": "delta_idem.1.before_write@0 10s: events=precise",
    },
    "exactly_once_kafka": {
        "kill": "kafka_tx.3.sliced@1: forwarded=precise",
        "task-raise": "kafka_tx.3.sliced@1: forwarded=precise",
        "driver-raise": "kafka_tx.4.recorded@1: forwarded=precise",
        "checkpoint-reset": "-: forwarded=SinkOwnerError",
        "speculation": "kafka_tx.2.in_transaction@1 #0 5s: forwarded=precise",
        "broker-pause": "kafka_tx.4.recorded@0 130s: forwarded=precise",
        "broker-restart": "kafka_tx.4.recorded@0 5s: forwarded=precise",
        "output-trim": "kafka_tx.3.sliced@1: forwarded=ReplayUnprovableError",
        "host-loss": "kafka_tx.2.in_transaction@1 #0: forwarded=precise",
        "partition": "kafka_tx.2.in_transaction@1 #0 10s: forwarded=precise",
        "slow-link": "kafka_tx.2.in_transaction@0 #0: forwarded=precise",
        "driver-partition": "kafka_tx_driver.slices_committed@1 10s: forwarded=precise",
    },
    "exactly_once_kafka_idempotent": {
        "kill": "kafka_idem.3.written@1: forwarded=precise",
        "task-raise": "kafka_idem.2.partial@1: forwarded=precise",
        "driver-raise": "kafka_idem.3.written@1: forwarded=precise",
        "checkpoint-reset": "-: forwarded=SinkOwnerError",
        "speculation": "-: forwarded=SinkConfigError",
        "output-trim": "kafka_idem.3.written@1: forwarded=ReplayUnprovableError",
    },
    "spark_kafka_sink": {
        "kill": "spark_kafka.1.written@1: forwarded=rollback-repeating",
        "driver-raise": "spark_kafka.1.written@1: forwarded=rollback-repeating",
        "checkpoint-reset": "-: forwarded=rollback-repeating",
    },
    "tracker_windows": {
        "kill": "tracker.after_sink@1: windows=precise",
        "task-raise": "tracked.gate.emitted@1: windows=precise",
        "driver-raise": "tracker.after_sink@1: windows=precise",
        "checkpoint-reset": "-: windows=CheckpointBehindAgent",
        "speculation": "tracked.gate.emitted@1 #1 5s: windows=precise",
        "txn-retention": "tracker.after_sink@1: windows=DeltaTxnExpiredError",
        "log-retention": "tracker.after_sink@1: windows=precise",
        "disorder": "-: windows=precise",
    },
    "tracker_two_queries": {
        "kill": "tracker.after_sink@1: totals=precise",
        "task-raise": "tracked.gate.emitted@1: totals=precise",
        "driver-raise": "tracker.after_sink@1: totals=precise",
        "checkpoint-reset": "-: totals=CheckpointBehindAgent",
        "speculation": "kafka_tx.2.in_transaction@1 #0 5s: totals=precise",
        "broker-pause": "tracker.after_sink@0 130s: totals=precise",
        "broker-restart": "tracker.after_sink@0 5s: totals=precise",
        "disorder": "-: totals=precise",
    },
    "ordering_dedup": {
        "kill": "dedup.after_output@0: ewma=precise",
        "driver-raise": "dedup.after_output@0: ewma=precise",
        "checkpoint-reset": "-: ewma=SinkOwnerError",
        "txn-retention": "dedup.after_output@0: ewma=DeltaTxnExpiredError",
    },
    "ordering_no_buffer": {
        "kill": "dedup.after_output@0: ewma=rollback-divergent",
    },
    "dedup_delta": {
        "kill": "dedup_delta.2.cataloged@1: unique=precise",
        "task-raise": "dedup_delta.1.staged@1: unique=precise",
        "driver-raise": "dedup_delta.2.cataloged@1: unique=precise",
        "checkpoint-reset": "-: unique=SinkOwnerError",
        "speculation": "dedup_delta.1.staged@1 #0 5s: unique=precise",
        "broker-pause": "dedup_delta.4.cleaned@0 130s: unique=precise",
        "broker-restart": "dedup_delta.4.cleaned@0 5s: unique=precise",
        "txn-retention": "dedup_delta.3.written@1: unique=DeltaTxnExpiredError",
        "log-retention": "dedup_delta.3.written@1: unique=precise",
        "store-errors": "dedup_delta.2.cataloged@0 10s: unique=precise",
    },
    "upsert_totals": {
        "kill": "upsert_totals.after_upsert@0: totals=precise, changes=rollback-convergent",
        "driver-raise": "upsert_totals.after_upsert@0: totals=precise, changes=rollback-convergent",
        "checkpoint-reset": "-: totals=precise, changes=rollback-repeating",
    },
}


def describe(cell: FaultCell, expected: dict[str, Expectation]) -> str:
    """One cell as :data:`MATRIX` writes it."""
    where = f"{cell.point.name}@{cell.batch}" if cell.point else "-"
    if cell.partition is not None:
        where += f" #{cell.partition}"
    if cell.seconds:
        where += f" {cell.seconds:g}s"
    outcome = ", ".join(f"{o}={e}" for o, e in expected.items())
    return f"{where}: {outcome}"


def declared_matrix() -> dict[str, dict[str, str]]:
    """The registry's matrix: every job's declared cells, described."""
    matrix = {}
    for name in registry.names():
        case = registry.get(name)
        matrix[name] = {
            fault.value: describe(cell, case.expected(fault))
            for fault in FaultClass
            if (cell := case.cell(fault)) is not None
        }
    return matrix


def test_registry_lists_the_pinned_jobs_in_the_pinned_order():
    assert registry.names() == list(MATRIX)


def test_every_job_declares_exactly_the_pinned_cells_and_outcomes():
    declared = declared_matrix()
    for name, cells in MATRIX.items():
        assert declared[name] == cells, name
