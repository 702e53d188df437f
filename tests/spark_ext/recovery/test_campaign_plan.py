"""The campaign's draws (pure): a seed replays, every draw is runnable, workloads reach jobs."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from jobs import registry
from jobs.cases.campaign import CAMPAIGN_JOBS, fault_points, variant
from spark_ext.crash import FaultSpec, lookup
from spark_ext.recovery import HarnessContext, RunSlot
from spark_ext.recovery.campaign import with_flag
from spark_ext.recovery.campaign_plan import draw, pick_job
from spark_ext.recovery.profiles import derive_profile
from spark_ext.sinks.protocol import validate_sink_id


@pytest.mark.parametrize("job", CAMPAIGN_JOBS)
def test_a_seed_draws_the_same_plan_and_every_fault_is_a_declared_step(job: str) -> None:
    case = registry.get(job)
    points = fault_points(case)
    assert points, f"{job} has no fault point to draw"
    for seed in range(60):
        plan = draw(seed, job, points)
        assert plan == draw(seed, job, points)
        *faulted, last = plan.steps
        assert last.fault is None and last.kill_after_s is None, "the last run must finish"
        assert 1 <= len(faulted) <= 3
        for step in faulted:
            assert (step.fault is None) != (step.kill_after_s is None)
            if step.fault:
                lookup(FaultSpec.parse(step.fault).point)  # a declared point, or KeyError
            assert re.fullmatch(r"local\[[1-3](,2)?\]", step.master)
        validate_sink_id(plan.workload.sink_id)


def test_draws_vary_what_production_varies() -> None:
    plans = [draw(seed, "exactly_once_kafka", ["kafka_tx.3.sliced"]) for seed in range(200)]
    steps = [s for p in plans for s in p.steps]
    assert {s.master for s in steps} >= {"local[1]", "local[2,2]", "local[3]"}
    assert {s.min_partitions for s in steps} >= {None, 1, 2, 5}
    assert {s.max_offsets for s in steps} >= {None, 7, 120}
    assert any("." in p.workload.sink_id for p in plans)
    assert {p.workload.quiet for p in plans} == {0, 1, 2}
    assert {p.workload.buckets for p in plans} == {1, 4, 8, 16}
    assert {p.workload.duplicate_delay for p in plans} == {3, 20, 60}
    assert sum(s.kill_after_s is not None for s in steps) > 10
    # a restart draws its session again: parallelism changes inside one chain
    assert any(len({s.master for s in p.steps}) > 1 for p in plans)
    ci = [draw(seed, "exactly_once_kafka", ["kafka_tx.3.sliced"], ci=True) for seed in range(200)]
    assert {len(p.steps) for p in ci} == {2} and max(p.workload.records for p in ci) <= 120


def test_pick_job_is_a_function_of_the_seed_and_reaches_every_job() -> None:
    picks = [pick_job(seed, CAMPAIGN_JOBS) for seed in range(300)]
    assert picks == [pick_job(seed, list(reversed(CAMPAIGN_JOBS))) for seed in range(300)]
    assert set(picks) == set(CAMPAIGN_JOBS)


def test_with_flag_replaces_appends_and_removes() -> None:
    args = ["--topic", "t", "--max-offsets-per-trigger", "100", "--out", "o"]
    assert with_flag(args, "--max-offsets-per-trigger", "7") == [
        "--topic",
        "t",
        "--out",
        "o",
        "--max-offsets-per-trigger",
        "7",
    ]
    assert with_flag(args, "--max-offsets-per-trigger", None) == ["--topic", "t", "--out", "o"]
    assert with_flag(["--a", "1"], "--b", "2") == ["--a", "1", "--b", "2"]


@pytest.mark.parametrize("job", CAMPAIGN_JOBS)
def test_the_workload_reaches_the_jobs_arguments(job: str, tmp_path: Path) -> None:
    case = registry.get(job)
    plan = draw(3, job, fault_points(case))
    fed = variant(case, plan.workload)
    assert fed.name == case.name and fed.module == case.module and fed.outputs == case.outputs
    ctx = HarnessContext(tmp_path, "127.0.0.1:1", "test", "rec-job-0123abcd")
    args = fed.job_args(ctx, RunSlot("campaign", tmp_path / "campaign"))
    if "--sink-id" in case.job_args(ctx, RunSlot("campaign", tmp_path)):
        assert args[args.index("--sink-id") + 1] == f"t0123abcd.{plan.workload.sink_id}"
    if job == "dedup_delta":
        assert args[args.index("--buckets") + 1] == str(plan.workload.buckets)
    if "--partitions" in args:
        assert args[args.index("--partitions") + 1] == str(plan.workload.partitions)
    assert registry.get(job) is case and case.workload is None, "the registry's case"


def test_a_derived_profile_replaces_the_master_and_shuffle_partitions(tmp_path: Path) -> None:
    from spark_ext.config import load_profile

    dest = derive_profile(
        "test",
        tmp_path / "p.toml",
        {"spark.spark_ext.kafka.minPartitions": "5"},
        settings={"master": "local[1,2]", "shuffle_partitions": 3},
    )
    profile = load_profile(dest)
    assert profile.spark.master == "local[1,2]" and profile.spark.shuffle_partitions == 3
    assert profile.spark.conf["spark.spark_ext.kafka.minPartitions"] == "5"


@pytest.mark.parametrize("ci", [True, False])
def test_the_replay_line_of_a_run_draws_the_same_plan_again(ci: bool) -> None:
    from jobs.cli import build_parser
    from spark_ext.recovery.campaign import CampaignOutcome

    case = registry.get("exactly_once_delta")
    plan = draw(7, case.name, fault_points(case), ci=ci)
    line = CampaignOutcome(plan, "fail", "", 0.0).replay
    args = build_parser().parse_args(line.split()[1:])
    assert draw(args.seed, args.job, fault_points(case), ci=args.lane == "ci") == plan
