"""Cases of the jobs on sensor readings (:func:`jobs.ordering_dedup.produce_readings`)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from jobs.cases import JobCase
from spark_ext.recovery import HarnessContext, OutputSpec

#: The ordering job's result rows (its ``RESULT_COLUMNS`` without the topic name).
READINGS = OutputSpec(
    columns=(
        "key",
        "record_id",
        "event_time",
        "temp_c",
        "temp_f",
        "ewma_f",
        "seq",
        "partition",
        "offset",
    )
)
#: The dedup sink's output: distinct readings with the coordinates of the copy kept.
UNIQUE = OutputSpec(columns=("reading_id", "sensor", "event_time", "temp_c", "partition", "offset"))


@dataclass(eq=False, kw_only=True)
class ReadingsCase(JobCase):
    """A job on sensor readings over ``partitions`` (``readings``: the other arguments of
    :func:`~jobs.ordering_dedup.sensor_readings`); the restart catches up in one batch."""

    readings: Mapping[str, int] = field(default_factory=dict)
    partitions: int = 2
    catch_up: bool = True

    def prepare(self, ctx: HarnessContext) -> None:
        from connectors.kafka import create_topic
        from jobs.ordering_dedup import produce_readings

        create_topic(ctx.bootstrap, ctx.topic("in"), self.partitions)
        produce_readings(
            ctx.bootstrap, ctx.topic("in"), partitions=self.partitions, **self.readings
        )
