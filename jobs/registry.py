"""Which guarantee jobs exist, how the recovery harness feeds and reads them, and their classes.

Every job here is a module of ``jobs/`` runnable as ``python -m jobs.X``, ``spark-ext run X``
and ``spark-submit jobs/X.py`` (``scripts/submit.sh``). Each entry is a
:class:`~spark_ext.recovery.RecoveryCase`: the input it reads, where it crashes, which of its
outputs are compared (on which columns) and the recovery class each output should get.

Example
-------
>>> from jobs import registry
>>> [o.expected.value for o in registry.get("at_most_once").outputs]
['gap']
>>> sorted(registry.names())[:2]
['at_least_once', 'at_most_once']
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from spark_ext.errors import SparkExtError
from spark_ext.recovery import (
    CrashPlan,
    ExpectedOutput,
    FinalStateView,
    HarnessContext,
    OutputSpec,
    RecoveryCase,
    RecoveryClass,
    RunSlot,
    read_delta_rows,
)


class UnknownJobError(SparkExtError, KeyError):
    """No job of that name is registered; the message lists the known ones."""

    def __init__(self, name: str, known: Sequence[str]) -> None:
        self.name = name
        super().__init__(f"no job {name!r} (known: {', '.join(sorted(known))})")

    def __str__(self) -> str:
        return str(self.args[0])


#: Compared columns of a table of events: the record and its Kafka coordinates.
EVENTS = OutputSpec(columns=("event_id", "user_id", "amount", "event_time", "partition", "offset"))

#: The at-least-once job's running aggregate: one state row per user.
EWMA = OutputSpec(
    columns=("user_id", "ewma", "events"),
    final_state=FinalStateView(key=("user_id",), value=("ewma", "events")),
)


class KafkaToDeltaCase(RecoveryCase):
    """A job reading demo events from one Kafka topic and writing Delta tables under ``--out``.

    Parameters
    ----------
    events
        Records produced to the input topic (3 partitions, one in ``malformed_every`` bad).
    max_offsets_per_trigger
        Records per micro-batch, so the job runs several batches and a crash hits the middle.
    extra_args
        Further arguments of every run.
    """

    def __init__(
        self,
        name: str,
        module: str,
        crash: CrashPlan,
        outputs: Sequence[ExpectedOutput],
        description: str,
        events: int = 200,
        malformed_every: int = 25,
        max_offsets_per_trigger: int | None = 100,
        extra_args: Sequence[str] = (),
    ) -> None:
        self.name = name
        self.module = module
        self.crash = crash
        self.outputs = tuple(outputs)
        self.description = description
        self.events = events
        self.malformed_every = malformed_every
        self.max_offsets_per_trigger = max_offsets_per_trigger
        self.extra_args = tuple(extra_args)

    def prepare(self, ctx: HarnessContext) -> None:
        from connectors.demo_events import produce_events
        from connectors.kafka import create_topic

        create_topic(ctx.bootstrap, ctx.topic("in"), partitions=3)
        produce_events(
            ctx.bootstrap, ctx.topic("in"), self.events, malformed_every=self.malformed_every
        )

    def job_args(self, ctx: HarnessContext, slot: RunSlot) -> list[str]:
        args = ["--profile", ctx.profile, "--topic", ctx.topic("in"), "--out", str(slot.out)]
        if self.max_offsets_per_trigger:
            args += ["--max-offsets-per-trigger", str(self.max_offsets_per_trigger)]
        return [*args, *self.extra_args]

    def read_output(self, ctx: HarnessContext, slot: RunSlot, output: str) -> list[dict[str, Any]]:
        spec = next(o.spec for o in self.outputs if o.name == output)
        return read_delta_rows(slot.out / output, spec.read_columns())


JOBS: dict[str, RecoveryCase] = {
    case.name: case
    for case in (
        KafkaToDeltaCase(
            "at_most_once",
            "jobs.at_most_once",
            CrashPlan(crash_at="at_most_once.after_offset_commit@1"),
            [ExpectedOutput("events", EVENTS, RecoveryClass.GAP)],
            "offsets committed before the write: a crash in between loses the batch",
        ),
        KafkaToDeltaCase(
            "at_least_once",
            "jobs.at_least_once",
            CrashPlan(crash_at="at_least_once.after_write@1"),
            [
                ExpectedOutput("events", EVENTS, RecoveryClass.ROLLBACK_REPEATING),
                ExpectedOutput("ewma", EWMA, RecoveryClass.ROLLBACK_DIVERGENT),
            ],
            "rows written before the offsets are committed: a replayed batch is written again",
        ),
    )
}


def names() -> list[str]:
    """Names of the registered jobs."""
    return list(JOBS)


def get(name: str) -> RecoveryCase:
    """The registered job ``name``; :class:`UnknownJobError` if there is none."""
    try:
        return JOBS[name]
    except KeyError:
        raise UnknownJobError(name, list(JOBS)) from None
