"""Cases of the tracker jobs: windows closed by the tracker instead of a watermark."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from jobs.cases import PRECISE, JobCase
from jobs.tracker_windows import EPOCH
from spark_ext.recovery import (
    ExpectedOutput,
    HarnessContext,
    OutputSpec,
    RunSlot,
    read_delta_rows,
)

#: The tracker job's windows: one row per (window, user).
WINDOWS = OutputSpec(
    columns=("window_start_ms", "window_end_ms", "key", "count", "sum_amount", "mean_amount")
)
#: The two-query tracker job's downstream totals: one row per window.
TOTALS = OutputSpec(
    columns=("window_start_ms", "window_end_ms", "key", "users", "events", "amount")
)
#: ``disorder``: one row per input row, by the window it belongs to and its key.
WINDOW_OF_ROW = OutputSpec(columns=("window_start_ms", "key"))
#: ``disorder`` of the two-query job: one row per input row, by its window (the downstream
#: totals are per window, over every user).
WINDOW_OF_INPUT = OutputSpec(columns=("window_start_ms",))
#: ``disorder``: the demo input's jitter inside a partition, and the disorder it is promised.
JITTER_MS, PROMISED_DISORDER_MS = 6_000, 1_000
WINDOW_MS = 10_000
EPOCH_MS = int(EPOCH.timestamp() * 1000)


def window_start_ms(event_time_ms: int) -> int:
    """Start of the 10 s tumbling window of :mod:`jobs.tracker_windows` holding the time."""
    return event_time_ms - event_time_ms % WINDOW_MS


@dataclass(eq=False, kw_only=True)
class TrackerWindowsCase(JobCase):
    """:mod:`jobs.tracker_windows` on ``events`` demo events (time-ordered partitions, closed).

    ``disorder``: the same events jittered by up to :data:`JITTER_MS` inside each partition
    while the job is promised :data:`PROMISED_DISORDER_MS`; every input row must be in exactly
    one window count or one late row.
    """

    accounting = WINDOW_OF_ROW
    #: Declared points its runs never reach (the campaign draws from the others): the Kafka
    #: agent's (a local agent here) and the driver path's (the distributed path runs).
    unreached: tuple[str, ...] = (
        "tracker.agent.before_send",
        "tracker.agent.before_commit",
        "tracker.agent.after_commit",
        "tracked.driver.",
    )
    #: The output table counting the input rows and its count column; the late-rows table.
    counted, late = ("windows", "count"), "late"
    outputs: tuple[ExpectedOutput, ...] = (ExpectedOutput("windows", WINDOWS, PRECISE),)
    tables: tuple[str, ...] = ("windows", "late")
    limit: int | None = 60
    events: int = 150
    partitions: int = 3

    def prepare(self, ctx: HarnessContext) -> None:
        from connectors.kafka import create_topic, produce
        from jobs.tracker_windows import demo_records

        create_topic(ctx.bootstrap, ctx.topic("in"), self.partitions)
        produce(ctx.bootstrap, ctx.topic("in"), demo_records(self.events, self.partitions))

    def job_args(self, ctx: HarnessContext, slot: RunSlot) -> list[str]:
        return [*super().job_args(ctx, slot), "--partitions", str(self.partitions)]

    def prepare_disordered(self, ctx: HarnessContext) -> list[dict[str, Any]]:
        from connectors.kafka import create_topic, produce
        from jobs.tracker_windows import demo_records, demo_time

        create_topic(ctx.bootstrap, ctx.topic("in"), self.partitions)
        records = list(demo_records(self.events, self.partitions, jitter_ms=JITTER_MS))
        produce(ctx.bootstrap, ctx.topic("in"), records)
        keys = [key.decode() for key, _, _ in records if key is not None]
        return [
            self._accounted(EPOCH_MS + demo_time(i, jitter_ms=JITTER_MS), {"key": key})
            for i, key in enumerate(keys)
        ]

    def disorder_args(self, ctx: HarnessContext, slot: RunSlot) -> list[str]:
        return [*self.job_args(ctx, slot), "--disorder-ms", str(PROMISED_DISORDER_MS)]

    def _accounted(self, event_time_ms: int, row: dict[str, Any]) -> dict[str, Any]:
        """``row`` on :attr:`accounting`'s columns, with the window of ``event_time_ms``."""
        row = {**row, "window_start_ms": window_start_ms(event_time_ms)}
        return {c: row[c] for c in self.accounting.columns}

    def accounted_rows(
        self, ctx: HarnessContext, slot: RunSlot
    ) -> tuple[list[dict[str, Any]], int]:
        (table, count), columns = self.counted, self.accounting.columns
        counted = read_delta_rows(slot.at(table), (*columns, count), ctx.settings)
        late = read_delta_rows(slot.at(self.late), (*columns[1:], "event_time_ms"), ctx.settings)
        rows = [{c: w[c] for c in columns} for w in counted for _ in range(int(w[count]))]
        rows += [self._accounted(int(r["event_time_ms"]), r) for r in late]
        return rows, len(late)


@dataclass(eq=False, kw_only=True)
class TrackerTwoQueriesCase(TrackerWindowsCase):
    """:mod:`jobs.tracker_two_queries`: its middle topic and Kafka agent are per run.

    ``disorder``: the upstream is promised ordered partitions (the job has no disorder
    setting) and gets the jittered demo input; each input row must be counted once in its
    window's downstream ``events`` or be one upstream late row (``late_up``).
    """

    accounting = WINDOW_OF_INPUT
    #: The local agent's points (a Kafka agent here) and the driver path's.
    unreached: tuple[str, ...] = (
        "tracker.agent.before_append",
        "tracker.agent.after_append",
        "tracker.agent.before_ends",
        "tracker.agent.before_snapshot",
        "tracker.agent.after_snapshot",
        "tracked.driver.",
    )
    counted, late = ("totals", "events"), "late_up"
    outputs: tuple[ExpectedOutput, ...] = (ExpectedOutput("totals", TOTALS, PRECISE),)
    tables: tuple[str, ...] = ()
    limit: int | None = 40
    events: int = 90

    def job_args(self, ctx: HarnessContext, slot: RunSlot) -> list[str]:
        return [
            *super().job_args(ctx, slot),
            *("--mid-topic", ctx.topic(f"mid-{slot.name}")),
            *("--agent", f"{ctx.tag}-{slot.name}"),
        ]

    def disorder_args(self, ctx: HarnessContext, slot: RunSlot) -> list[str]:
        return self.job_args(ctx, slot)  # the promise: ordered partitions
