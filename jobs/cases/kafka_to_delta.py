"""Cases of the jobs fed demo events from Kafka and writing Delta tables, and their outputs."""

from __future__ import annotations

from dataclasses import dataclass

from jobs.cases import PRECISE, JobCase
from spark_ext.recovery import ExpectedOutput, FinalStateView, HarnessContext, OutputSpec, RunSlot

#: Compared columns of a table of events: the record and its Kafka coordinates.
EVENTS = OutputSpec(columns=("event_id", "user_id", "amount", "event_time", "partition", "offset"))
#: The at-least-once job's running aggregate: one state row per user.
EWMA = OutputSpec(
    columns=("user_id", "ewma", "events"),
    final_state=FinalStateView(key=("user_id",), value=("ewma", "events")),
)
#: The changes feed of :mod:`jobs.upsert_totals`: per user, the last change is its state.
CHANGES = OutputSpec(
    columns=("user_id", "events", "total_cents"),
    final_state=FinalStateView(
        key=("user_id",), value=("events", "total_cents"), order=("batch_id",)
    ),
)
#: Its MERGEd table: one row per user.
UPSERTED = OutputSpec(columns=("user_id", "events", "total_cents"))


@dataclass(eq=False, kw_only=True)
class EventsCase(JobCase):
    """A job fed ``events`` demo events over ``partitions`` (one in ``malformed_every``
    malformed, ``skew`` of them onto partition 0)."""

    events: int = 200
    malformed_every: int = 25
    partitions: int = 3
    skew: float = 0.0

    def prepare(self, ctx: HarnessContext) -> None:
        from connectors.demo_events import produce_events
        from connectors.kafka import create_topic

        create_topic(ctx.bootstrap, ctx.topic("in"), self.partitions)
        bad, skew = self.malformed_every, self.skew
        n, partitions = self.events, self.partitions
        produce_events(
            ctx.bootstrap, ctx.topic("in"), n, malformed_every=bad, partitions=partitions, skew=skew
        )


@dataclass(eq=False, kw_only=True)
class ExactlyOnceDeltaCase(EventsCase):
    """:mod:`jobs.exactly_once_delta`: its table, checkpoint and sink id named by flags."""

    module: str = "jobs.exactly_once_delta"
    outputs: tuple[ExpectedOutput, ...] = (ExpectedOutput("events", EVENTS, PRECISE),)
    tables: tuple[str, ...] = ("events",)

    def out_args(self, ctx: HarnessContext, slot: RunSlot) -> list[str]:
        table, checkpoint = slot.at("events"), slot.at("_chk")
        return ["--table", table, "--checkpoint", checkpoint, "--sink-id", "events"]
