"""Which guarantee jobs exist, by name, as the recovery harness sees them: one table.

Each entry is a :class:`~jobs.cases.JobCase`: its module, where the ``kill`` run dies, each
output with the class a kill gives it, and the other fault classes' cells; why each declares
what it does: docs/design.md, "Fault points". ``registry.get("at_most_once")`` is one.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from connectors.delta.dedup_staging import DEDUP_DELTA
from connectors.kafka.slices import SLICES_COMMITTED
from jobs import at_least_once, at_most_once, eo_spark_kafka_sink, upsert_totals
from jobs.cases import (
    BEHIND_AGENT,
    OWNER_REFUSED,
    PRECISE,
    SPECULATION_REFUSED,
    TXN_EXPIRED,
    broker_cells,
    cells,
    driver_cells,
    driver_partition,
    host_cells,
    sink_cells,
)
from jobs.cases.kafka_to_delta import (
    CHANGES,
    EVENTS,
    EWMA,
    UPSERTED,
    EventsCase,
    ExactlyOnceDeltaCase,
)
from jobs.cases.kafka_to_kafka import FORWARDED, KafkaToKafkaCase
from jobs.cases.readings import READINGS, UNIQUE, ReadingsCase
from jobs.cases.tracker import TrackerTwoQueriesCase, TrackerWindowsCase
from spark_ext.dedup import AFTER_OUTPUT as DEDUP_AFTER_OUTPUT
from spark_ext.errors import SparkExtError
from spark_ext.recovery import (
    CrashPlan,
    ExpectedOutput,
    FaultCell,
    FaultClass,
    RecoveryCase,
    RecoveryClass,
)
from spark_ext.sinks.protocol import (
    DELTA_IDEMPOTENT,
    DELTA_TWO_PHASE,
    KAFKA_IDEMPOTENT,
    KAFKA_SLICED,
)
from spark_ext.streaming.handler import AFTER_SINK as TRACKER_AFTER_SINK
from spark_ext.streaming.stages import GATE_EMITTED as TRACKER_GATE_EMITTED


class UnknownJobError(SparkExtError, KeyError):
    """No job of that name is registered; the message lists the known ones."""

    def __init__(self, name: str, known: Sequence[str]) -> None:
        self.name = name
        super().__init__(f"no job {name!r} (known: {', '.join(sorted(known))})")

    def __str__(self) -> str:
        return str(self.args[0])


def _ordering(name: str, expected: RecoveryClass, **fields: Any) -> ReadingsCase:
    """:mod:`jobs.ordering_dedup`: only an order fixed by the buffer makes the recovered EWMA
    equal the clean run's."""
    extra = fields.pop("extra_args", ())
    return ReadingsCase(
        name=name,
        module="jobs.ordering_dedup",
        kill=CrashPlan.at(DEDUP_AFTER_OUTPUT, 0),
        outputs=(ExpectedOutput("ewma", READINGS, expected),),
        tables=("ewma", "catalog", "late"),
        extra_args=("--partitions", "2", *extra),
        limit=50,
        readings={"sensors": 4, "per_sensor": 30, "duplicate_every": fields.pop("every", 0)},
        **fields,
    )


_TRACKER_CELLS = (
    FaultCell(FaultClass.TASK_RAISE, TRACKER_GATE_EMITTED, 1),
    FaultCell(FaultClass.DRIVER_RAISE, TRACKER_AFTER_SINK, 1),
    FaultCell(FaultClass.CHECKPOINT_RESET, expected=BEHIND_AGENT),
    FaultCell(FaultClass.DISORDER, expected=PRECISE),
)

#: Every registered job, family by family.
CASES: tuple[RecoveryCase, ...] = (
    EventsCase(
        name="at_most_once",
        outputs=(ExpectedOutput("events", EVENTS, RecoveryClass.GAP),),
        description="offsets committed before the write: a crash in between loses the batch",
        cells=driver_cells(at_most_once.AFTER_OFFSET_COMMIT, 1, PRECISE),
    ),
    EventsCase(
        name="at_least_once",
        outputs=(
            ExpectedOutput("events", EVENTS, RecoveryClass.ROLLBACK_REPEATING),
            ExpectedOutput("ewma", EWMA, RecoveryClass.ROLLBACK_DIVERGENT),
        ),
        description="rows written before the offsets are committed: a replayed batch is "
        "written again",
        cells=driver_cells(at_least_once.AFTER_WRITE, 1),
    ),
    ExactlyOnceDeltaCase(
        name="exactly_once_delta",
        description="two-phase Delta sink: killed after its commit, the replay is recognised",
        cells=sink_cells(
            DELTA_TWO_PHASE,
            *host_cells(DELTA_TWO_PHASE.fault(1)),
            driver_partition(DELTA_TWO_PHASE.fault(2)),
            task=1,
            driver=3,
            speculation=1,
            broker=3,
            txn=3,
            log=3,
            slow=1,
            store=2,
        ),
        extra_args=("--mode", "two_phase"),
    ),
    ExactlyOnceDeltaCase(
        name="exactly_once_delta_idempotent",
        description="idempotent Delta sink (txnAppId/txnVersion): the replayed write is skipped",
        cells=sink_cells(DELTA_IDEMPOTENT, driver=3, txn=3, log=3, store=1),
        extra_args=("--mode", "idempotent"),
    ),
    KafkaToKafkaCase(
        name="exactly_once_kafka",
        kill=CrashPlan.at(KAFKA_SLICED.fault(3), 1),
        cells=sink_cells(
            KAFKA_SLICED,
            *host_cells(KAFKA_SLICED.fault(2)),
            driver_partition(SLICES_COMMITTED),
            task=3,
            driver=4,
            speculation=2,
            broker=4,
            trim=3,
            slow=2,
        ),
        description="two-phase Kafka sink, a transaction per task: committed slices are recognised",
        extra_args=("--sink-id", "forwarded", "--mode", "two_phase"),
    ),
    KafkaToKafkaCase(
        name="exactly_once_kafka_idempotent",
        extra_args=("--sink-id", "forwarded", "--mode", "idempotent"),
        description="idempotent Kafka sink: a replay re-sends only the record ids not yet "
        "in the topic",
        cells=sink_cells(
            KAFKA_IDEMPOTENT,
            FaultCell(FaultClass.SPECULATION, expected=SPECULATION_REFUSED),
            task=2,
            driver=3,
            trim=3,
        ),
    ),
    KafkaToKafkaCase(
        name="spark_kafka_sink",
        module="jobs.eo_spark_kafka_sink",
        outputs=(ExpectedOutput("forwarded", FORWARDED, RecoveryClass.ROLLBACK_REPEATING),),
        description="negative control: Spark's own Kafka writer writes a replayed batch again",
        cells=driver_cells(eo_spark_kafka_sink.WRITTEN, 1),
    ),
    TrackerWindowsCase(
        name="tracker_windows",
        description="windows released by the tracker, written idempotently per batch",
        cells=cells(
            *_TRACKER_CELLS,
            FaultCell(FaultClass.SPECULATION, TRACKER_GATE_EMITTED, 1, seconds=5.0, partition=1),
            FaultCell(FaultClass.TXN_RETENTION, TRACKER_AFTER_SINK, 1, TXN_EXPIRED),
            FaultCell(FaultClass.LOG_RETENTION, TRACKER_AFTER_SINK, 1, PRECISE),
        ),
    ),
    TrackerTwoQueriesCase(
        name="tracker_two_queries",
        description="downstream windows closed by the upstream query's tracker",
        cells=cells(
            *_TRACKER_CELLS,
            FaultCell(FaultClass.SPECULATION, KAFKA_SLICED.fault(2), 1, seconds=5.0, partition=0),
            *broker_cells(TRACKER_AFTER_SINK),
        ),
    ),
    _ordering(
        "ordering_dedup",
        PRECISE,
        description="ordering buffer + dedup + EWMA: same output under another batch plan",
        every=5,
        cells=driver_cells(
            DEDUP_AFTER_OUTPUT,
            0,
            OWNER_REFUSED,
            FaultCell(FaultClass.TXN_RETENTION, DEDUP_AFTER_OUTPUT, 0, TXN_EXPIRED),
        ),
    ),
    _ordering(
        "ordering_no_buffer",
        RecoveryClass.ROLLBACK_DIVERGENT,
        description="EWMA folded in arrival order (--no-buffer): another batch plan, other values",
        extra_args=("--no-buffer", "--no-dedup"),
    ),
    ReadingsCase(
        name="dedup_delta",
        outputs=(ExpectedOutput("unique", UNIQUE, PRECISE),),
        description="at-least-once input + DeltaDedupSink: each reading exactly once",
        cells=sink_cells(
            DEDUP_DELTA, task=1, speculation=1, driver=2, broker=4, txn=3, log=3, store=2
        ),
        tables=("unique", "catalog"),
        limit=40,
        readings={"sensors": 3, "per_sensor": 30, "duplicate_every": 3},
    ),
    EventsCase(
        name="upsert_totals",
        outputs=(
            ExpectedOutput("totals", UPSERTED, PRECISE),
            ExpectedOutput("changes", CHANGES, RecoveryClass.ROLLBACK_CONVERGENT),
        ),
        description="running totals MERGEd at least once: the change feed repeats, then converges",
        cells=driver_cells(
            upsert_totals.AFTER_UPSERT,
            0,
            {"totals": PRECISE, "changes": RecoveryClass.ROLLBACK_REPEATING},
        ),
        catch_up=True,
        events=300,
    ),
)

#: The jobs by name; a name declared twice is a ``ValueError`` at import.
JOBS: dict[str, RecoveryCase] = {case.name: case for case in CASES}
if len(JOBS) != len(CASES):
    raise ValueError("a job name is declared twice in jobs.registry")


def names() -> list[str]:
    """Names of the registered jobs."""
    return list(JOBS)


def get(name: str) -> RecoveryCase:
    """The registered job ``name``; :class:`UnknownJobError` if there is none."""
    try:
        return JOBS[name]
    except KeyError:
        raise UnknownJobError(name, list(JOBS)) from None
