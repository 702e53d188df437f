"""The campaign's CI lane: five seeded randomized runs, one per protocol family (two-phase Delta,
Kafka slices, idempotent Kafka, the tracker across two queries, the dedup sink), each a chain of
faulted runs with the session changed at every restart, against a run without faults.
``SPARK_EXT_CAMPAIGN_RUNS=N`` runs N seeds over every campaign job instead (the full lane draws
bigger workloads: ``spark-ext campaign --seed 1000 --runs 200 --parallel 2``)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from jobs import registry
from jobs.cases.campaign import CAMPAIGN_JOBS, fault_points, variant
from spark_ext.recovery import RecoveryHarness
from spark_ext.recovery.campaign import format_campaign, run_campaign
from spark_ext.recovery.campaign_plan import draw

#: The CI lane's jobs (the suite's 35-minute budget: about 40 s a run on 2 idle cores).
CI_JOBS = (
    "exactly_once_delta",
    "exactly_once_kafka",
    "exactly_once_kafka_idempotent",
    "tracker_two_queries",
    "dedup_delta",
)
RUNS = int(os.environ.get("SPARK_EXT_CAMPAIGN_RUNS", "0")) or len(CI_JOBS)
JOBS = CI_JOBS if RUNS == len(CI_JOBS) else CAMPAIGN_JOBS
#: The CI lane's first seed; run i is job i of :data:`JOBS` (round robin), and each replays
#: with ``spark-ext campaign --seed S --runs 1 --job J``.
FIRST_SEED = 1


def test_ci_lane_of_seeded_randomized_runs(kafka_bootstrap: str, tmp_path: Path) -> None:
    # Every run is a process of its own, the fault-free reference too: two references in this
    # process's session at once race on its Python data sources and worker sockets.
    harness = RecoveryHarness(tmp_path, kafka_bootstrap, profile="test", timeout_s=600)
    plans = []
    for i, seed in enumerate(range(FIRST_SEED, FIRST_SEED + RUNS)):
        case = registry.get(JOBS[i % len(JOBS)])
        plan = draw(seed, case.name, fault_points(case), ci=RUNS <= 10)
        plans.append((variant(case, plan.workload), plan))
    outcomes = run_campaign(harness, plans, parallel=2)
    table = format_campaign(outcomes)
    print(table)
    assert len(outcomes) == RUNS
    fired = [r for o in outcomes for r in o.runs if "no fault fired" not in r]
    assert fired, "no run of the lane fired a fault: the lane proves nothing"
    failing = [o for o in outcomes if o.status != "pass"]
    if failing:
        pytest.fail(table)
