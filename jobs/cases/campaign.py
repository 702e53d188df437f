"""The campaign's jobs (which, and the workloads: docs/design.md, "The randomized campaign"),
and :func:`variant`, a copy of a registered case fed a drawn workload."""

from __future__ import annotations

import dataclasses
from typing import Any

from jobs.cases import JobCase
from jobs.cases.kafka_to_delta import EventsCase
from jobs.cases.readings import ReadingsCase
from jobs.cases.tracker import TrackerWindowsCase
from spark_ext.crash import declared
from spark_ext.recovery import FaultClass, RecoveryCase
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
    """Every declared step of the protocols the job's cells name (not only the cells' own),
    but those the case says its runs never reach (``unreached``: names or prefixes)."""
    cells = [case.cell(fault) for fault in FaultClass]
    named = {c.point.name for c in cells if c is not None and c.point is not None}
    prefixes = {name.split(".")[0] + "." for name in named}
    unreached = tuple(getattr(case, "unreached", ()))
    found = {p.name for prefix in prefixes for p in declared(prefix)} | named
    return sorted(n for n in found if not n.startswith(unreached))


def _inputs(case: RecoveryCase, w: Workload) -> dict[str, Any]:
    """The fields of ``case`` that make it produce ``w`` as its input."""
    if isinstance(case, ReadingsCase):
        per_sensor = max(3, w.records // SENSORS)
        shape = {"duplicate_every": w.duplicate_every, "duplicate_delay": w.duplicate_delay}
        readings = {"sensors": SENSORS, "per_sensor": per_sensor, "quiet": w.quiet, **shape}
        return {"partitions": w.partitions, "readings": readings}
    if isinstance(case, TrackerWindowsCase):
        return {"events": w.records, "partitions": w.partitions}
    if isinstance(case, EventsCase):
        return {"events": w.records, "partitions": w.partitions, "skew": w.skew}
    raise ValueError(f"{case.name}: no campaign workload for {type(case).__name__}")


def variant(case: RecoveryCase, workload: Workload) -> RecoveryCase:
    """A copy of ``case`` whose input is ``workload`` (and sink id, where the job takes one)."""
    inputs = _inputs(case, workload)
    assert isinstance(case, JobCase)  # _inputs knows no other
    return dataclasses.replace(case, kill=case.crash, workload=workload, **inputs)
