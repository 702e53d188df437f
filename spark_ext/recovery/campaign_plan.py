"""What one randomized campaign run does, drawn from its seed (pure: no Spark, no I/O; what is
drawn: docs/design.md, "The randomized campaign").

>>> run = draw(7, "exactly_once_delta", ["delta_2pc.3.committed"], ci=True)
>>> run == draw(7, "exactly_once_delta", ["delta_2pc.3.committed"], ci=True)
True
>>> run.steps[-1].fault is None and run.steps[-1].kill_after_s is None
True
"""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["CampaignPlan", "RunStep", "Workload", "draw", "pick_job"]

#: Pieces of drawn sink ids: dotted names, names ending like a derived name's suffix.
_ID_PARTS = ("a", "b", "c", "run", "out", "s0", "events", "x_1")


@dataclass(frozen=True)
class Workload:
    """The input of one campaign run and the names it is written under."""

    records: int  # events, or readings, produced before the first run
    partitions: int  # of the input topic
    skew: float  # share of the events on partition 0 (0.0: round robin)
    duplicate_every: int  # readings: every n-th delivered twice (0: none) ...
    quiet: int  # readings: sensors silent in the middle third
    sink_id: str
    buckets: int = 4  # dedup: buckets of the state
    duplicate_delay: int = 3  # ... the copy this many records after the original

    def describe(self) -> str:
        return (
            f"{self.records} records on {self.partitions} partitions, skew {self.skew:g}, "
            f"dup every {self.duplicate_every}, {self.quiet} quiet, sink {self.sink_id!r}, "
            f"{self.buckets} buckets, copies {self.duplicate_delay} records later"
        )


@dataclass(frozen=True)
class RunStep:
    """One run of the chain: the session it runs in, and its fault (none for the last)."""

    master: str
    shuffle_partitions: int
    max_offsets: int | None  # --max-offsets-per-trigger (None: the backlog in one batch)
    min_partitions: int | None  # the Kafka source's (None: one Spark partition per Kafka one)
    fault: str | None = None  # point@batch:kind
    kill_after_s: float | None = None  # a SIGKILL this long after the start instead

    def describe(self) -> str:
        fault = self.fault or (
            f"SIGKILL after {self.kill_after_s:g}s" if self.kill_after_s else "no fault"
        )
        return (
            f"{self.master} shuffle {self.shuffle_partitions} maxOffsets {self.max_offsets} "
            f"minPartitions {self.min_partitions}: {fault}"
        )


@dataclass(frozen=True)
class CampaignPlan:
    """One campaign run: its seed, job, workload and chain of runs."""

    seed: int
    job: str
    workload: Workload
    steps: tuple[RunStep, ...]
    second_query: RunStep | None = None  # on the same output and sink id, checkpoint deleted
    ci: bool = False  # drawn for the CI lane (smaller workload, one faulted run)

    def describe(self) -> str:
        lines = [f"seed {self.seed} {self.job}: {self.workload.describe()}"]
        lines += [f"  run {i}: {s.describe()}" for i, s in enumerate(self.steps)]
        if self.second_query is not None:
            lines.append(f"  second query: {self.second_query.describe()}")
        return "\n".join(lines)


def pick_job(seed: int, jobs: Sequence[str]) -> str:
    """The job of run ``seed`` when the campaign is not given one: a function of the seed."""
    if not jobs:
        raise ValueError("no jobs to pick from")
    return sorted(jobs)[random.Random(f"job:{seed}").randrange(len(jobs))]


def _sink_id(rng: random.Random) -> str:
    parts = [rng.choice(_ID_PARTS) for _ in range(rng.randint(1, 3))]
    return ".".join(parts)


def _session(rng: random.Random, ci: bool) -> RunStep:
    cores = rng.randint(1, 2 if ci else 3)
    retries = rng.random() < 0.6
    return RunStep(
        master=f"local[{cores},2]" if retries else f"local[{cores}]",
        shuffle_partitions=rng.randint(1, 4),
        max_offsets=rng.choice((None, 15, 30, 60) if ci else (None, 7, 15, 30, 60, 120)),
        min_partitions=rng.choice((None, None, 1, 2, 5)),
    )


def draw(seed: int, job: str, points: Sequence[str], ci: bool = False) -> CampaignPlan:
    """The plan of campaign run ``seed`` for ``job``, whose protocol has fault ``points`` (``ci``:
    a smaller workload and one faulted run)."""
    rng = random.Random(f"{job}:{seed}")
    workload = Workload(
        records=rng.randint(40, 120 if ci else 400),
        partitions=rng.randint(1, 4),
        skew=rng.choice((0.0, 0.0, 0.5, 0.8)),
        duplicate_every=rng.choice((0, 2, 3, 5)),
        quiet=rng.randint(0, 2),
        sink_id=_sink_id(rng),
        buckets=rng.choice((1, 4, 8, 16)),
        duplicate_delay=rng.choice((3, 20, 60)),
    )
    steps = []
    for _ in range(1 if ci else rng.randint(1, 3)):
        session = _session(rng, ci)
        if not points or rng.random() < 0.15:
            fault, after = None, round(rng.uniform(4.0, 25.0), 1)
        else:
            kind = rng.choices(("kill", "raise", "sleep=2"), weights=(5, 4, 1))[0]
            fault, after = (
                f"{rng.choice(sorted(points))}@{rng.randint(0, 3 if ci else 9)}:{kind}",
                None,
            )
        steps.append(dataclasses.replace(session, fault=fault, kill_after_s=after))
    steps.append(_session(rng, ci))
    second = _session(rng, ci) if rng.random() < 0.25 else None
    return CampaignPlan(seed, job, workload, tuple(steps), second, ci)
