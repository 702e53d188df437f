"""Cases of the jobs forwarding demo events from Kafka to an output topic per run."""

from __future__ import annotations

from typing import Any

from jobs.cases.fault_cells import (
    OWNER_REFUSED,
    SPECULATION_REFUSED,
    UNPROVABLE,
    broker_cells,
    cells,
)
from jobs.cases.kafka_to_delta import KafkaToDeltaCase
from jobs.eo_spark_kafka_sink import WRITTEN as SPARK_KAFKA_WRITTEN
from spark_ext.recovery import (
    CrashPlan,
    ExpectedOutput,
    FaultCell,
    FaultClass,
    HarnessContext,
    OutputSpec,
    RecoveryCase,
    RecoveryClass,
    RunSlot,
)
from spark_ext.sinks.protocol import KAFKA_IDEMPOTENT, KAFKA_SLICED

#: A Kafka -> Kafka job's output record, by the input record it names.
FORWARDED = OutputSpec(columns=("key", "src_partition", "src_offset", "src_value"))


class KafkaToKafkaCase(KafkaToDeltaCase):
    """A job forwarding demo events to an output topic per run (``--out``, ``--checkpoint``).

    Output records are read ``read_committed`` and compared by the input record their JSON
    value names (``{"topic", "partition", "offset", "value"}``), not by their own offsets.
    """

    def job_args(self, ctx: HarnessContext, slot: RunSlot) -> list[str]:
        args = ["--profile", ctx.profile, "--topic", ctx.topic("in")]
        args += ["--out", ctx.topic(f"out-{slot.name}"), "--checkpoint", str(slot.out / "_chk")]
        args += ["--max-offsets-per-trigger", "100"]
        return [*args, *self.extra_args]

    def expire_output(self, ctx: HarnessContext, slot: RunSlot, fault: FaultClass) -> None:
        """``output-trim``: every record written to the run's output topic so far is trimmed."""
        from spark_ext.recovery.retention import trim_topic

        if fault is not FaultClass.OUTPUT_TRIM:
            super().expire_output(ctx, slot, fault)
        trim_topic(ctx.bootstrap, ctx.topic(f"out-{slot.name}"))

    def read_output(self, ctx: HarnessContext, slot: RunSlot, output: str) -> list[dict[str, Any]]:
        import json

        from connectors.kafka import consume_all, create_topic

        topic = ctx.topic(f"out-{slot.name}")
        create_topic(ctx.bootstrap, topic, 3)  # no-op once the job made it
        rows = []
        for _partition, _offset, key, value in consume_all(ctx.bootstrap, topic):
            src = json.loads(value)
            rows.append(
                {
                    "key": key.decode() if key is not None else None,
                    "src_partition": src["partition"],
                    "src_offset": src["offset"],
                    "src_value": src["value"],
                }
            )
        return rows


#: The Kafka -> Kafka jobs, in the order :mod:`jobs.registry` lists them.
CASES: tuple[RecoveryCase, ...] = (
    # The tasks' slice records are the progress: attempt 0 committed its slice, then failed,
    # and attempt 1 finds it committed; a reset checkpoint is another query (owner refused).
    KafkaToKafkaCase(
        "exactly_once_kafka",
        "jobs.exactly_once_kafka",
        CrashPlan.at(KAFKA_SLICED.fault(3), 1),
        [ExpectedOutput("forwarded", FORWARDED, RecoveryClass.PRECISE)],
        "two-phase Kafka sink, a transaction per task: committed slices are recognised",
        extra_args=("--sink-id", "forwarded", "--mode", "two_phase"),
        cells=cells(
            FaultCell(FaultClass.TASK_RAISE, KAFKA_SLICED.fault(3), 1),
            FaultCell(FaultClass.DRIVER_RAISE, KAFKA_SLICED.fault(4), 1),
            FaultCell(FaultClass.CHECKPOINT_RESET, expected=OWNER_REFUSED),
            FaultCell(FaultClass.SPECULATION, KAFKA_SLICED.fault(2), 1, seconds=5.0, partition=0),
            *broker_cells(KAFKA_SLICED.fault(4)),
            # A partly committed batch is recognised by reading its records back, however
            # Spark slices the replay: once retention trimmed them it is refused, never
            # guessed (docs/design.md, "Kafka sinks").
            FaultCell(FaultClass.OUTPUT_TRIM, KAFKA_SLICED.fault(3), 1, UNPROVABLE),
        ),
    ),
    KafkaToKafkaCase(
        "exactly_once_kafka_idempotent",
        "jobs.exactly_once_kafka",
        CrashPlan.at(KAFKA_IDEMPOTENT.fault(3), 1),
        [ExpectedOutput("forwarded", FORWARDED, RecoveryClass.PRECISE)],
        "idempotent Kafka sink: a replay re-sends only the record ids not yet in the topic",
        extra_args=("--sink-id", "forwarded", "--mode", "idempotent"),
        cells=cells(
            FaultCell(FaultClass.TASK_RAISE, KAFKA_IDEMPOTENT.fault(2), 1),
            FaultCell(FaultClass.DRIVER_RAISE, KAFKA_IDEMPOTENT.fault(3), 1),
            FaultCell(FaultClass.CHECKPOINT_RESET, expected=OWNER_REFUSED),
            # Two live attempts of a task cannot be fenced without transactions: refused.
            FaultCell(FaultClass.SPECULATION, expected=SPECULATION_REFUSED),
            # The replay is proven by reading back what it wrote: once retention trimmed
            # that, it is refused, never guessed.
            FaultCell(FaultClass.OUTPUT_TRIM, KAFKA_IDEMPOTENT.fault(3), 1, UNPROVABLE),
        ),
    ),
    KafkaToKafkaCase(
        "spark_kafka_sink",
        "jobs.eo_spark_kafka_sink",
        CrashPlan.at(SPARK_KAFKA_WRITTEN, 1),
        [ExpectedOutput("forwarded", FORWARDED, RecoveryClass.ROLLBACK_REPEATING)],
        "negative control: Spark's own Kafka writer writes a replayed batch again",
        cells=cells(
            FaultCell(FaultClass.DRIVER_RAISE, SPARK_KAFKA_WRITTEN, 1),
            FaultCell(FaultClass.CHECKPOINT_RESET),
        ),
    ),
)
