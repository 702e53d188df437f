"""The campaign's jobs, and how each is fed a drawn workload (:mod:`spark_ext.recovery.campaign`).

Which jobs take part: docs/design.md, "The randomized campaign". :func:`variant` returns a copy
of a registered case producing the workload as its input (events skewed onto partition 0,
readings over four sensors with copies and quiet sensors, ordered tracker events), with the
drawn sink id behind a part unique to the run.
"""

from __future__ import annotations

from typing import Any

from jobs.cases.kafka_to_delta import EventsCase
from jobs.cases.readings import ReadingsCase
from jobs.cases.tracker import TrackerWindowsCase
from spark_ext.crash import declared
from spark_ext.recovery import HarnessContext, RecoveryCase, RunSlot
from spark_ext.recovery.campaign import with_flag
from spark_ext.recovery.campaign_plan import Workload

__all__ = ["CAMPAIGN_JOBS", "fault_points", "variant"]

#: The jobs the campaign draws from.
CAMPAIGN_JOBS = (
    "exactly_once_delta",
    "exactly_once_delta_idempotent",
    "exactly_once_kafka",
    "exactly_once_kafka_idempotent",
    "tracker_windows",
    "tracker_two_queries",
    "ordering_dedup",
    "dedup_delta",
)

#: Sensors of the readings jobs' workloads.
SENSORS = 4


def fault_points(case: RecoveryCase) -> list[str]:
    """Every declared step of the protocols the job's cells name (not only the cells' own)."""
    named = {c.point.name for c in case.cells.values() if c.point is not None}
    if case.crash.point is not None:
        named.add(case.crash.point.name)
    prefixes = {name.split(".")[0] + "." for name in named}
    return sorted({p.name for prefix in prefixes for p in declared(prefix)} | named)


class _Fed:
    """Mixin: ``prepare`` produces :attr:`workload`; ``job_args`` names its partitions/sink."""

    workload: Workload


class _FedEvents(_Fed, EventsCase):
    def prepare(self, ctx: HarnessContext) -> None:
        from connectors.demo_events import produce_events
        from connectors.kafka import create_topic

        w = self.workload
        create_topic(ctx.bootstrap, ctx.topic("in"), w.partitions)
        produce_events(
            ctx.bootstrap,
            ctx.topic("in"),
            w.records,
            malformed_every=self.malformed_every,
            partitions=w.partitions,
            skew=w.skew,
        )

    def job_args(self, ctx: HarnessContext, slot: RunSlot) -> list[str]:
        args = super().job_args(ctx, slot)
        if "--sink-id" not in args:
            return args
        # Unique to the run (its topics' tag) in front, so runs sharing the broker never share
        # a sink id (a second query on the same id is drawn on purpose, not by accident).
        return with_flag(args, "--sink-id", f"t{ctx.tag[-8:]}.{self.workload.sink_id}")


class _FedTracker(_Fed, TrackerWindowsCase):
    def prepare(self, ctx: HarnessContext) -> None:
        from connectors.kafka import create_topic, produce
        from jobs.tracker_windows import demo_records

        w = self.workload
        create_topic(ctx.bootstrap, ctx.topic("in"), w.partitions)
        produce(ctx.bootstrap, ctx.topic("in"), demo_records(w.records, w.partitions))

    def job_args(self, ctx: HarnessContext, slot: RunSlot) -> list[str]:
        return with_flag(super().job_args(ctx, slot), "--partitions", str(self.workload.partitions))


class _FedReadings(_Fed, ReadingsCase):
    def prepare(self, ctx: HarnessContext) -> None:
        from connectors.kafka import create_topic
        from jobs.ordering_dedup import produce_readings

        w = self.workload
        create_topic(ctx.bootstrap, ctx.topic("in"), w.partitions)
        produce_readings(
            ctx.bootstrap,
            ctx.topic("in"),
            sensors=SENSORS,
            per_sensor=max(3, w.records // SENSORS),
            partitions=w.partitions,
            duplicate_every=w.duplicate_every,
            duplicate_delay=w.duplicate_delay,
            quiet=w.quiet,
        )

    def job_args(self, ctx: HarnessContext, slot: RunSlot) -> list[str]:
        args = super().job_args(ctx, slot)
        if self.module == "jobs.dedup_delta":
            return [*args, "--buckets", str(self.workload.buckets)]
        return with_flag(args, "--partitions", str(self.workload.partitions))


_FED: tuple[tuple[type[Any], type[Any]], ...] = (
    (TrackerWindowsCase, _FedTracker),
    (ReadingsCase, _FedReadings),
    (EventsCase, _FedEvents),
)


def variant(case: RecoveryCase, workload: Workload) -> RecoveryCase:
    """A copy of ``case`` whose input is ``workload`` (and sink id, where the job takes one)."""
    for family, fed in _FED:
        if isinstance(case, family):
            cls: type[RecoveryCase] = type(f"Fed{type(case).__name__}", (fed, type(case)), {})
            out: RecoveryCase = cls.__new__(cls)
            out.__dict__.update(case.__dict__, workload=workload)
            return out
    raise ValueError(f"{case.name}: no campaign workload for {type(case).__name__}")
