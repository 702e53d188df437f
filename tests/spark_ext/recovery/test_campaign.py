"""The campaign's CI lane: six seeded randomized runs, one per protocol family (two-phase Delta,
Kafka slices, idempotent Kafka, the tracker alone and across two queries, the dedup sink), each a
faulted run with the session changed at the restart, then a second query from a deleted
checkpoint, against a run without faults. The seeds are chosen so that the lane injects what
the fault matrix's CI cells used to (a task raise into two-phase Delta, a driver raise into the
Kafka, tracker and dedup sinks, ``checkpoint-reset`` into each): :data:`CI_RUNS`.
``SPARK_EXT_CAMPAIGN_RUNS=N`` runs N seeds over every campaign job instead (the full lane draws
bigger workloads: ``spark-ext campaign --seed 1000 --runs 200 --parallel 2``)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from jobs import registry
from jobs.cases.campaign import CAMPAIGN_JOBS, fault_points, variant
from spark_ext.crash import declared
from spark_ext.recovery import RecoveryHarness
from spark_ext.recovery.campaign import format_campaign, run_campaign
from spark_ext.recovery.campaign_plan import CampaignPlan, draw

#: The CI lane (the suite's 35-minute budget: about 40 s a run on 2 idle cores): per job, a
#: seed whose plan raises on the side named (replay: ``spark-ext campaign --lane ci --seed S
#: --runs 1 --job J``) and runs a second query from a deleted checkpoint.
CI_RUNS: dict[str, tuple[int, str]] = {
    "exactly_once_delta": (608, "executor"),  # delta2pc.1.staged@2:raise, retried in its batch
    "exactly_once_kafka": (32, "driver"),  # kafka_tx.4.recorded@1:raise
    "exactly_once_kafka_idempotent": (9, "executor"),  # kafka_idem.2.partial@0:raise
    "tracker_windows": (244, "driver"),  # tracker.after_sink@0:raise
    "tracker_two_queries": (5, "driver"),  # tracker.after_reports@1:raise
    "dedup_delta": (62, "driver"),  # dedup_delta.3.written@2:raise
}
RUNS = int(os.environ.get("SPARK_EXT_CAMPAIGN_RUNS", "0"))
#: The full lane's first seed; run i is job i of the campaign's jobs (round robin).
FIRST_SEED = 1


def _ci_plans() -> list[CampaignPlan]:
    sides = {p.name: p.side for p in declared()}
    plans = []
    for job, (seed, side) in CI_RUNS.items():
        plan = draw(seed, job, fault_points(registry.get(job)), ci=True)
        fault = plan.steps[0].fault or ""
        assert fault.endswith(":raise") and sides[fault.split("@")[0]] == side, (
            f"seed {seed} of {job} no longer draws a {side} raise ({fault or 'a timed kill'}):"
            " choose another seed"
        )
        assert plan.second_query is not None, f"seed {seed} of {job} draws no second query"
        # The fault's batch and one after it exist (the input read maxOffsets at a time; the
        # tracker jobs run more batches than that: their end events).
        step, batch = plan.steps[0], int(fault.split("@")[1].split(":")[0])
        batches = -(-plan.workload.records // step.max_offsets) if step.max_offsets else 1
        assert job.startswith("tracker") or batch <= batches - 2, (
            f"seed {seed} of {job} faults batch {batch} of about {batches}: it may never run"
        )
        plans.append(plan)
    return plans


def test_the_ci_seeds_draw_what_the_lane_promises() -> None:
    assert len(_ci_plans()) == len(CI_RUNS)


def test_ci_lane_of_seeded_randomized_runs(kafka_bootstrap: str, tmp_path: Path) -> None:
    # Every run is a process of its own, the fault-free reference too: two references in this
    # process's session at once race on its Python data sources and worker sockets.
    harness = RecoveryHarness(tmp_path, kafka_bootstrap, profile="test", timeout_s=600)
    if RUNS:
        plans = [
            draw(seed, job, fault_points(registry.get(job)), ci=RUNS <= 10)
            for i, seed in enumerate(range(FIRST_SEED, FIRST_SEED + RUNS))
            for job in [CAMPAIGN_JOBS[i % len(CAMPAIGN_JOBS)]]
        ]
    else:
        plans = _ci_plans()
    outcomes = run_campaign(
        harness, [(variant(registry.get(p.job), p.workload), p) for p in plans], parallel=2
    )
    table = format_campaign(outcomes)
    print(table)
    assert len(outcomes) == len(plans)
    failing = [o for o in outcomes if o.status != "pass"]
    if failing:
        pytest.fail(table)
    if RUNS:
        fired = [r for o in outcomes for r in o.runs if "no fault fired" not in r]
        assert fired, "no run of the lane fired a fault: the lane proves nothing"
    else:
        unfired = [o.plan.job for o in outcomes if "no fault fired" in o.runs[0]]
        assert not unfired, f"the drawn fault did not fire in {unfired}: choose other seeds"
        refused = [o.plan.job for o in outcomes if "second query" not in o.detail]
        assert not refused, f"no second query was judged in {refused}"


def test_the_campaign_draws_no_point_a_tracker_job_never_reaches() -> None:
    """Both agents' points are declared once both modules are imported; a job reaches only its
    own agent's (seeds 32 and 5 drew the other agent's point and no fault fired)."""
    windows = fault_points(registry.get("tracker_windows"))
    two_queries = fault_points(registry.get("tracker_two_queries"))
    assert "tracker.agent.before_ends" in windows and "tracker.agent.before_commit" in two_queries
    assert not {"tracker.agent.before_commit", "tracker.agent.before_send"} & set(windows)
    assert not {"tracker.agent.before_ends", "tracker.agent.after_snapshot"} & set(two_queries)
    assert not [p for p in windows + two_queries if p.startswith("tracked.driver.")]
