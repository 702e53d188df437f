"""Cases of the jobs forwarding demo events from Kafka to an output topic per run."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from jobs.cases import PRECISE
from jobs.cases.kafka_to_delta import EventsCase
from spark_ext.recovery import ExpectedOutput, FaultClass, HarnessContext, OutputSpec, RunSlot

#: A Kafka -> Kafka job's output record, by the input record it names.
FORWARDED = OutputSpec(columns=("key", "src_partition", "src_offset", "src_value"))


@dataclass(eq=False, kw_only=True)
class KafkaToKafkaCase(EventsCase):
    """A job forwarding demo events to an output topic per run (``--out``, ``--checkpoint``).

    Output records are read ``read_committed`` and compared by the input record their JSON
    value names (``{"topic", "partition", "offset", "value"}``), not by their own offsets.
    """

    module: str = "jobs.exactly_once_kafka"
    outputs: tuple[ExpectedOutput, ...] = (ExpectedOutput("forwarded", FORWARDED, PRECISE),)

    def out_args(self, ctx: HarnessContext, slot: RunSlot) -> list[str]:
        return ["--out", ctx.topic(f"out-{slot.name}"), "--checkpoint", slot.at("_chk")]

    def expire_output(self, ctx: HarnessContext, slot: RunSlot, fault: FaultClass) -> None:
        """``output-trim``: every record written to the run's output topic so far is trimmed."""
        from spark_ext.recovery.retention import trim_topic

        if fault is not FaultClass.OUTPUT_TRIM:
            raise NotImplementedError(f"{self.name} does not implement {fault}")
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
