"""The ``spark-ext`` console script: list, run, matrix arguments (no Spark needed for these)."""

from __future__ import annotations

import subprocess
import sys
import sysconfig
from pathlib import Path

from jobs import cli, registry
from spark_ext.jobrun import REPO


def test_list_shows_every_registered_job_with_its_expected_classes(capsys):
    assert cli.main(["list"]) == 0
    out = capsys.readouterr().out
    for name, case in registry.JOBS.items():
        assert name in out
        for o in case.outputs:
            assert f"{o.name}: {o.expected}" in out


def test_list_shows_each_jobs_fault_points_and_declared_outcomes(capsys):
    assert cli.main(["list"]) == 0
    out = capsys.readouterr().out
    assert "delta2pc.1.staged [executor] batch 1" in out
    assert "SinkOwnerError" in out and "rollback-convergent" in out
    for case in registry.JOBS.values():
        assert case.crash.point is not None and case.crash.point.name in out


def test_run_starts_the_job_in_the_callers_folder(monkeypatch, tmp_path):
    """Relative --table / --profile paths must mean the caller's folder, not the repository."""
    seen = {}

    def call(cmd, **kwargs):
        seen.update(kwargs, cmd=cmd)
        return 0

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(cli.subprocess, "call", call)
    assert cli.main(["run", "exactly_once_delta", "--table", "rel/t"]) == 0
    assert seen.get("cwd") in (None, str(tmp_path), tmp_path)
    assert seen["cmd"][-2:] == ["--table", "rel/t"]


def test_matrix_refuses_an_unknown_fault_class_naming_the_known_ones(capsys):
    assert cli.main(["matrix", "exactly_once_delta", "--faults", "kill,meteor"]) == 2
    err = capsys.readouterr().err
    assert "meteor" in err and "checkpoint-reset" in err


def test_run_of_an_unknown_job_names_the_known_ones(capsys):
    assert cli.main(["run", "no_such_job"]) == 2
    err = capsys.readouterr().err
    assert "no_such_job" in err and "at_most_once" in err


def test_a_typed_error_is_one_line_unless_traceback_is_asked_for(capsys):
    assert cli.main(["run", "no_such_job"]) == 2
    assert capsys.readouterr().err.startswith("spark-ext: UnknownJobError: no job 'no_such_job'")
    assert cli.main(["--traceback", "run", "no_such_job"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("Traceback") and err.splitlines()[-1].startswith("spark-ext: Unknown")


def test_run_passes_the_rest_of_the_command_line_to_the_job_module():
    out = subprocess.run(
        [sys.executable, "-m", "jobs.cli", "run", "ingest_events", "--help"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    assert "usage: ingest_events.py" in out.stdout and "--topic" in out.stdout


def test_console_script_is_installed():
    script = Path(sysconfig.get_path("scripts")) / "spark-ext"  # beside this interpreter
    assert script.exists()
    out = subprocess.run([str(script), "list"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and "at_least_once" in out.stdout


def test_check_and_matrix_without_the_plot_extra_stop_before_any_job(monkeypatch, capsys):
    real = cli.importlib.util.find_spec
    monkeypatch.setattr(
        cli.importlib.util, "find_spec", lambda n, *a: None if n == "matplotlib" else real(n, *a)
    )
    for command in (["check", "at_most_once"], ["matrix", "at_most_once"]):
        assert cli.main(command) == 2
        assert "spark-ext[plot]" in capsys.readouterr().err


def test_matrix_on_the_isolated_cluster_needs_the_store_and_says_so_before_starting_it(
    monkeypatch, capsys, tmp_path
):
    monkeypatch.delenv("SPARK_EXT_STORAGE", raising=False)
    args = ["matrix", "exactly_once_kafka", "--cluster", "isolated", "--workdir", str(tmp_path)]
    assert cli.main(args) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "--storage s3" in err, err
    assert not (tmp_path / "cluster").exists()  # nothing started
