"""Crash points fire only where and when the crash test asks, and kill the process group."""

from __future__ import annotations

import sys
import time

import pytest

from spark_ext.crash import (
    FAULT_ENV,
    FAULT_LOG_ENV,
    FaultKind,
    FaultSpec,
    InjectedFault,
    declare,
    declared,
    fault_log_entries,
)
from spark_ext.errors import ConfigError
from spark_ext.jobrun import run_job


@pytest.mark.parametrize(
    ("spec", "name", "batch", "expected"),
    [
        (None, "sink.1.staged", 0, False),
        ("sink.1.staged", "sink.1.staged", 3, True),
        ("sink.1.staged", "sink.2.committed", 3, False),
        ("sink.1.staged@2", "sink.1.staged", 3, False),
        ("sink.1.staged@3", "sink.1.staged", 3, True),
        ("sink.1.staged@3", "sink.1.staged", None, True),
    ],
)
def test_a_point_is_armed_by_name_and_batch(monkeypatch, spec, name, batch, expected) -> None:
    if spec is None:
        monkeypatch.delenv(FAULT_ENV, raising=False)
    else:
        monkeypatch.setenv(FAULT_ENV, spec)
    assert declare(name, "driver").armed(batch) is expected


def test_crash_point_kills_the_whole_process_group(tmp_path) -> None:
    """A child of the job (like Spark's JVM) dies with it: nothing survives the crash."""
    marker = tmp_path / "child.pid"
    script = tmp_path / "job_with_child.py"
    script.write_text(
        "import subprocess, sys, time\n"
        "from spark_ext.crash import declare\n"
        f"child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
        f"open({str(marker)!r}, 'w').write(str(child.pid))\n"
        "declare('demo.step', 'driver').reached(1)\n"
        "print('not reached')\n"
    )
    (tmp_path / "__init__.py").write_text("")
    sys.path.insert(0, str(tmp_path.parent))
    try:
        run = run_job(
            f"{tmp_path.name}.job_with_child",
            fault="demo.step@1",
            env={"PYTHONPATH": str(tmp_path.parent)},
            timeout_s=60,
        )
    finally:
        sys.path.remove(str(tmp_path.parent))
    assert run.killed and run.fired("demo.step", "kill")
    assert "not reached" not in run.output_tail
    assert not _running(int(marker.read_text()))


def _running(pid: int) -> bool:
    """Alive and not a zombie (a killed orphan may wait to be reaped by init)."""
    for _ in range(50):
        try:
            state = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0]
        except FileNotFoundError:
            return False
        if state in {"Z", "X"}:
            return False
        time.sleep(0.1)
    return True


def test_job_without_crash_point_runs_to_its_end() -> None:
    run = run_job("json.tool", ["--help"], fault="never.reached", timeout_s=60)
    assert run.ok and not run.killed and run.faults == ()


def test_a_run_keeps_its_fault_log_where_it_is_told(tmp_path) -> None:
    """On an isolated cluster the executors log their tasks' faults into a folder they see."""
    job = tmp_path / "where_job.py"
    job.write_text(f"import os\nprint(os.environ[{FAULT_LOG_ENV!r}])\n")
    run = run_job("where_job", cwd=tmp_path, tmp_root=tmp_path / "shared", timeout_s=60)
    assert run.ok and run.output_tail.strip().startswith(
        str(tmp_path / "shared" / "spark-ext-run-")
    )


def test_crash_point_in_a_worker_with_its_own_group_kills_the_driver(tmp_path) -> None:
    """PySpark's daemon puts Python workers in their own process group; a crash point reached
    there must still kill the driver (the job's session leader), not just the worker."""
    script = tmp_path / "job_with_worker.py"
    script.write_text(
        "import os, subprocess, sys, time\n"
        "worker = (\n"
        "    'import os, time\\n'\n"
        "    'os.setpgid(0, 0)\\n'\n"
        "    'from spark_ext.crash import declare\\n'\n"
        '    \'declare("demo.task", "executor").reached(2)\\n\'\n'
        ")\n"
        "subprocess.Popen([sys.executable, '-c', worker]).wait()\n"
        "time.sleep(30)\n"
        "print('driver survived')\n"
    )
    (tmp_path / "__init__.py").write_text("")
    run = run_job(
        f"{tmp_path.name}.job_with_worker",
        fault="demo.task@2",
        env={"PYTHONPATH": str(tmp_path.parent)},
        timeout_s=60,
    )
    assert run.killed and run.fired("demo.task", "kill")
    assert run.seconds < 25
    assert "driver survived" not in run.output_tail


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ("a.1.b", FaultSpec("a.1.b")),
        ("a.1.b@3", FaultSpec("a.1.b", 3)),
        ("a.1.b@3:raise", FaultSpec("a.1.b", 3, FaultKind.RAISE)),
        ("a.1.b:sleep=2.5", FaultSpec("a.1.b", None, FaultKind.SLEEP, 2.5)),
    ],
)
def test_fault_spec_parses_and_prints_back(spec, expected) -> None:
    assert FaultSpec.parse(spec) == expected
    assert str(FaultSpec.parse(spec)) == spec


@pytest.mark.parametrize("spec", ["", "a@x", "a:explode", "a:sleep", "a:raise=3"])
def test_bad_fault_spec_is_a_config_error_naming_the_setting(spec) -> None:
    with pytest.raises(ConfigError, match=FAULT_ENV):
        FaultSpec.parse(spec)


def test_raise_fault_fires_after_the_step_and_is_logged(monkeypatch, tmp_path) -> None:
    point = declare("unit.1.written", "driver", "unit test step")
    log = tmp_path / "faults.jsonl"
    monkeypatch.setenv(FAULT_ENV, "unit.1.written@2:raise")
    monkeypatch.setenv(FAULT_LOG_ENV, str(log))
    point.reached(1)  # another batch: nothing
    assert fault_log_entries(log) == []
    with pytest.raises(InjectedFault) as err:
        point.reached(2)
    assert err.value.point == "unit.1.written" and err.value.batch_id == 2
    [entry] = fault_log_entries(log)
    assert (entry["point"], entry["kind"], entry["batch"], entry["side"]) == (
        "unit.1.written",
        "raise",
        2,
        "driver",
    )


def test_sleep_fault_delays_the_step(monkeypatch) -> None:
    point = declare("unit.2.slow", "driver")
    monkeypatch.setenv(FAULT_ENV, "unit.2.slow:sleep=0.3")
    t0 = time.monotonic()
    point.reached(0)
    assert time.monotonic() - t0 >= 0.3


def test_a_raise_fault_is_not_a_kill(monkeypatch) -> None:
    monkeypatch.setenv(FAULT_ENV, "unit.1.written:raise")
    spec = FaultSpec.parse("unit.1.written:raise")
    assert spec.kind is FaultKind.RAISE and declare("unit.1.written", "driver").armed(0)


def test_declaring_a_point_twice_with_another_side_is_refused() -> None:
    declare("unit.3.twice", "driver")
    assert declare("unit.3.twice", "driver") in declared("unit.3")
    with pytest.raises(ValueError, match=r"unit\.3\.twice"):
        declare("unit.3.twice", "executor")


def test_every_sink_protocol_step_is_a_declared_point() -> None:
    from spark_ext.sinks.protocol import DELTA_TWO_PHASE, KAFKA_IDEMPOTENT

    names = {p.name for p in declared()}
    assert set(DELTA_TWO_PHASE.points()) | set(KAFKA_IDEMPOTENT.points()) <= names
    assert DELTA_TWO_PHASE.fault(1).side == "executor"


def test_a_kill_at_a_random_moment_names_the_last_step_the_run_reached(tmp_path) -> None:
    """A traced run (random kills) logs every point reached: the kill is placed after the last
    one, here step 2 of batch 1, while a step the job never reached is not named."""
    go = tmp_path / "go"
    script = tmp_path / "job_with_steps.py"
    script.write_text(
        "import os, time\n"
        "from spark_ext.crash import declare\n"
        "steps = [declare(f'rand.{n}.step', 'driver') for n in (1, 2, 3)]\n"
        "for batch in (0, 1):\n"
        "    for n, step in enumerate(steps, 1):\n"
        "        step.reached(batch)\n"
        "        if (batch, n) == (1, 2):\n"
        f"            open({str(go)!r}, 'w').close()\n"
        "            time.sleep(60)\n"
    )
    (tmp_path / "__init__.py").write_text("")
    run = run_job(
        f"{tmp_path.name}.job_with_steps",
        env={"PYTHONPATH": str(tmp_path.parent)},
        kill_when=go.exists,
        kill_after_s=0.2,
        timeout_s=60,
    )
    assert run.killed and run.faults == ()
    assert run.last_step == "rand.2.step@1"
    assert [(s["point"], s["batch"]) for s in run.steps][-3:] == [
        ("rand.3.step", 0),
        ("rand.1.step", 1),
        ("rand.2.step", 1),
    ]


def test_an_untraced_run_logs_no_steps() -> None:
    run = run_job("json.tool", ["--help"], timeout_s=60)
    assert run.ok and run.steps == () and run.last_step is None


def test_a_point_is_armed_only_when_a_fault_is_requested_there(monkeypatch) -> None:
    point = declare("unit.3.armed", "any")
    assert not point.armed(1)
    monkeypatch.setenv(FAULT_ENV, "unit.3.armed@2:raise")
    assert point.armed(2) and not point.armed(1)
    assert not declare("unit.4.other", "any").armed(2)


def test_a_fault_spec_with_a_partition_fires_only_in_that_partitions_task() -> None:
    spec = FaultSpec.parse("sink.1.staged@1#0:sleep=5")
    assert (spec.batch, spec.partition, spec.seconds) == (1, 0, 5.0)
    assert str(spec) == "sink.1.staged@1#0:sleep=5"
    assert not spec.matches("sink.1.staged", 1)  # on the driver: no task, no partition 0
    assert FaultSpec.parse("sink.1.staged@1:sleep=5").matches("sink.1.staged", 1)
