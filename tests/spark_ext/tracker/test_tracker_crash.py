"""Driver kill and injected task failure: the tracked window job emits exactly the same windows."""

from __future__ import annotations

import sys
from concurrent.futures import Future
from pathlib import Path

import pandas as pd
import pytest

from connectors.kafka import produce
from jobs.tracker_windows import demo_records, demo_time
from spark_ext.jobrun import JobRun, run_job
from spark_ext.tracker.agent import LocalTrackingAgent
from tests.conftest import start_selected, unique_topic
from tests.spark_ext.tracker.conftest import assert_table_is, demo_events

pytestmark = [pytest.mark.integration, pytest.mark.crash]

N, PARTITIONS, STEP_MS = 150, 3, 700


def expected_windows(spark):
    """The windows a clean run emits, computed from the generator with pandas."""
    df = demo_events(N, STEP_MS).rename(columns={"user": "key"})
    g = df.groupby(["window_start_ms", "key"])["amount"]
    out = pd.DataFrame({"count": g.size(), "sum_amount": g.sum(), "mean_amount": g.mean()})
    out = out.reset_index()
    out["window_end_ms"] = out["window_start_ms"] + 10_000
    cols = ["window_start_ms", "window_end_ms", "key", "count", "sum_amount", "mean_amount"]
    return spark.createDataFrame(out[cols].astype({"count": "int64"}))


def topic_with(kafka_bootstrap: str, prefix: str, records) -> str:
    name = unique_topic(kafka_bootstrap, prefix, PARTITIONS)
    produce(kafka_bootstrap, name, records)
    return name


def job_args(topic: str, out: Path, *extra: str) -> list[str]:
    args = ["--profile", "test", "--topic", topic, "--partitions", str(PARTITIONS)]
    return [*args, "--out", str(out), "--max-offsets-per-trigger", "60", *extra]


@pytest.fixture(scope="module")
def job_runs(request, kafka_bootstrap, tmp_path_factory) -> dict[str, Future]:
    """Each test's job processes (its own topic and output folder), two tests at a time."""

    def kill_then_task_failure() -> tuple[Path, JobRun, JobRun]:
        topic = topic_with(
            kafka_bootstrap, "trk-crash", demo_records(N, PARTITIONS, step_ms=STEP_MS)
        )
        out = tmp_path_factory.mktemp("trk-crash") / "out"
        args = job_args(topic, out)
        # 1. SIGKILL after batch 1 wrote its windows AND applied its reports, before Spark
        #    committed it: the restart replays batch 1 and re-sends the same report keys.
        killed = run_job(
            "jobs.tracker_windows", args, fault="tracker.after_reports@1", timeout_s=600
        )
        # 2. Restart from the checkpoint; attempt 0 of the gate tasks of batch 2 fails after
        #    its data went out (Spark retries them: master local[2,4]).
        rerun = run_job(
            "jobs.tracker_windows",
            [*args, "--master", "local[2,4]"],
            fault="tracked.gate.emitted@2:raise",
            timeout_s=600,
        )
        return out, killed, rerun

    def kill_between_writes_and_reports() -> tuple[Path, JobRun, JobRun]:
        records = demo_records(N, PARTITIONS, step_ms=STEP_MS, jitter_ms=JITTER_MS)
        topic = topic_with(kafka_bootstrap, "trk-crash-jit", records)
        out = tmp_path_factory.mktemp("trk-crash-jit") / "out"
        args = job_args(topic, out, "--disorder-ms", str(DISORDER_MS))
        killed = run_job(
            "jobs.tracker_windows", args, fault="tracker.after_sink@2:kill", timeout_s=600
        )
        # the restart's first transformWithState driver worker starts past Spark's 10 s
        again = run_job(
            "jobs.tracker_windows", args, timeout_s=600, env=slow_first_worker(out.parent)
        )
        return out, killed, again

    def driver_path_kill_after_its_state() -> tuple[Path, JobRun, JobRun]:
        records = demo_records(N, PARTITIONS, step_ms=STEP_MS, jitter_ms=JITTER_MS)
        topic = topic_with(kafka_bootstrap, "trk-crash-drv", records)
        out = tmp_path_factory.mktemp("trk-crash-drv") / "out"
        args = job_args(topic, out, "--disorder-ms", str(DISORDER_MS), "--path", "driver")
        killed = run_job(
            "jobs.tracker_windows", args, fault="tracked.driver.state_saved@2:kill", timeout_s=600
        )
        again = run_job("jobs.tracker_windows", args, timeout_s=600)
        return out, killed, again

    return start_selected(
        request,
        {
            "test_driver_kill_and_task_failure_emit_the_same_windows_as_a_clean_run": (
                kill_then_task_failure
            ),
            KILL_BETWEEN: kill_between_writes_and_reports,
            DRIVER_PATH: driver_path_kill_after_its_state,
        },
    )


def test_driver_kill_and_task_failure_emit_the_same_windows_as_a_clean_run(spark, job_runs):
    name = "test_driver_kill_and_task_failure_emit_the_same_windows_as_a_clean_run"
    out, killed, rerun = job_runs[name].result()
    assert killed.killed and killed.fired("tracker.after_reports", "kill"), killed.output_tail
    assert rerun.ok, rerun.output_tail
    failed = [f for f in rerun.faults if f["point"] == "tracked.gate.emitted"]
    assert failed and all(f["attempt"] == 0 and f["batch"] == 2 for f in failed), rerun.faults

    assert_table_is(spark, out / "windows", expected_windows(spark))
    state = LocalTrackingAgent(out / "tracker").state()
    assert state.open_substreams() == [] and state.late_reports == 0
    ends = LocalTrackingAgent(out / "tracker").end_events(0, 10**9)
    assert [e.seq for e in ends] == list(range(1, 12))  # 11 windows, each ended once
    assert len({e.substream for e in ends}) == 11


JITTER_MS, DISORDER_MS = 6_000, 1_000
KILL_BETWEEN = (
    "test_a_kill_between_the_writes_and_the_reports_keeps_windows_plus_late_rows_equal_to_the_input"
)


def slow_first_worker(folder: Path) -> dict[str, str]:
    """A ``PYSPARK_PYTHON`` that starts the first transformWithState driver worker 12 s late,
    past Spark's fixed 10 s for a worker to connect back (as on an overloaded machine)."""
    folder.mkdir(parents=True, exist_ok=True)
    script = folder / "slow-python"
    script.write_text(
        "#!/bin/sh\n"
        'case " $* " in *" pyspark.sql.streaming.transform_with_state_driver_worker "*)\n'
        f'  mkdir "{folder}/slowed" 2>/dev/null && sleep 12;;\n'
        "esac\n"
        f'exec "{sys.executable}" "$@"\n'
    )
    script.chmod(0o755)
    return {"PYSPARK_PYTHON": str(script)}


def broken_promises() -> set[tuple[int, int]]:
    """(partition, offset) of the jittered demo events beyond the 1 s allowed disorder."""
    out, top = set(), {}
    for i in range(N):
        p, offset, t = i % PARTITIONS, i // PARTITIONS, demo_time(i, STEP_MS, JITTER_MS)
        if p in top and t < top[p] - DISORDER_MS:
            out.add((p, offset))
        top[p] = max(top.get(p, t), t)
    return out


def test_a_kill_between_the_writes_and_the_reports_keeps_windows_plus_late_rows_equal_to_the_input(
    spark, job_runs
):
    """Jitter of 6 s inside each partition, 1 s allowed: killed after batch 2's windows and
    late rows were written, before its reports were applied; the restart replays batch 2
    (both Delta writes skip it) and every input row is in exactly one of the two tables."""
    out, killed, again = job_runs[KILL_BETWEEN].result()
    assert killed.killed and killed.fired("tracker.after_sink", "kill"), killed.output_tail
    assert again.ok, again.output_tail
    # the job restarted itself once after Spark's worker timeout (jobs.console)
    assert (out.parent / "slowed").is_dir(), again.output_tail
    assert "restarting from the checkpoint (1 of 2)" in again.output_tail, again.output_tail
    assert_rows_balance(spark, out)


DRIVER_PATH = "test_the_driver_path_killed_after_writing_its_state_replays_from_the_batch_before"


def test_the_driver_path_killed_after_writing_its_state_replays_from_the_batch_before(
    spark, job_runs
):
    """The driver path on the jittered input, killed after batch 2's state was written and
    before its rows: the restart replays batch 2 from batch 1's state (invariant 2), so the
    windows batch 2 released are written, once; every input row in exactly one table."""
    out, killed, again = job_runs[DRIVER_PATH].result()
    assert killed.killed and killed.fired("tracked.driver.state_saved", "kill"), killed.output_tail
    assert again.ok, again.output_tail
    assert_rows_balance(spark, out)
    state = LocalTrackingAgent(out / "tracker").state()
    assert state.open_substreams() == [] and state.late_reports == 0


def assert_rows_balance(spark, out: Path) -> None:
    """Window counts plus late rows are the input; the late rows are the broken promises."""
    windows = spark.read.format("delta").load(str(out / "windows")).toPandas()
    late = spark.read.format("delta").load(str(out / "late")).toPandas()
    assert int(windows["count"].sum()) + len(late) == N
    got = {(int(p), int(o)) for p, o in zip(late["src_partition"], late["src_offset"], strict=True)}
    assert got == broken_promises() and len(got) == len(late) > 0
    assert not windows.duplicated(["window_start_ms", "key"]).any()
