"""A job's start-up checks and what it prints (docs/design.md, "A job that talks"): pure logic
here, without Spark or a broker; the job processes are in test_job_talks.py."""

from __future__ import annotations

import json
import logging
import socket
from pathlib import Path

import pytest

from jobs.console import error_line
from jobs.startup import job_parser, location
from spark_ext import preflight
from spark_ext.crash import STEP_DIR_ENV, declare, last_reached
from spark_ext.errors import BrokerUnreachableError, CheckpointMismatchError
from spark_ext.jobrun import JOB_LOG_FORMAT, relayed, run_job
from spark_ext.metrics import source_lag
from spark_ext.sinks.errors import DeltaTargetPathError, TopicMissingError


def write_offsets(checkpoint: Path, batch: int, *sources: dict[str, dict[str, int]]) -> None:
    """An offset-log entry as Spark writes it: ``v1``, the batch's metadata, one line a source."""
    (checkpoint / "offsets").mkdir(parents=True, exist_ok=True)
    lines = ["v1", json.dumps({"batchWatermarkMs": 0}), *(json.dumps(s) for s in sources)]
    (checkpoint / "offsets" / str(batch)).write_text("\n".join(lines))


def test_a_checkpoint_of_another_topic_is_refused_naming_both(tmp_path):
    checkpoint = tmp_path / "cp"
    preflight.require_checkpoint_reads(checkpoint, ["events"])  # new: passes
    write_offsets(checkpoint, 0, {"orders": {"0": 3}})
    write_offsets(checkpoint, 1, {"orders": {"0": 5, "1": 2}}, {"agent": {"seq": "a"}})
    (checkpoint / "offsets" / ".1.crc").write_text("")
    assert preflight.checkpoint_topics(checkpoint) == [["orders"], ["orders"]]
    preflight.require_checkpoint_reads(checkpoint, ["orders"])
    with pytest.raises(CheckpointMismatchError) as err:
        preflight.require_checkpoint_reads(checkpoint, ["events"])
    line = error_line(err.value)
    assert line is not None and "reading orders; this job reads events" in line
    assert "fix: pass another --checkpoint" in line and "failOnDataLoss" not in line
    # A run with another topic failed after planning batch 2: the checkpoint now fails both.
    (checkpoint / "commits").mkdir()
    (checkpoint / "commits" / "1").write_text("v1")
    write_offsets(checkpoint, 2, {"events": {"0": 9}})
    assert preflight.checkpoint_topics(checkpoint) == [["orders"], ["events"]]
    for topic, other in (("orders", "events"), ("events", "orders")):
        with pytest.raises(CheckpointMismatchError, match=f"reading {other}; this job reads"):
            preflight.require_checkpoint_reads(checkpoint, [topic])


def test_a_table_path_that_is_a_file_or_other_files_is_refused(tmp_path):
    preflight.require_table_folder(tmp_path / "new")  # missing: passes
    (tmp_path / "empty").mkdir()
    preflight.require_table_folder(tmp_path / "empty")
    (tmp_path / "delta" / "_delta_log").mkdir(parents=True)
    (tmp_path / "delta" / "part-0.parquet").write_bytes(b"")
    preflight.require_table_folder(tmp_path / "delta")
    (tmp_path / "file").write_text("x")
    with pytest.raises(DeltaTargetPathError, match="is a file"):
        preflight.require_table_folder(tmp_path / "file")
    (tmp_path / "csv").mkdir()
    (tmp_path / "csv" / "a.csv").write_text("a,b\n")
    with pytest.raises(DeltaTargetPathError, match=r"holds 1 file\(s\) \(a.csv, ...\) but no"):
        preflight.require_table_folder(tmp_path / "csv")


def test_an_unreachable_broker_is_named_after_a_bounded_wait():
    with socket.socket() as s:  # a port nothing listens on once closed
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(BrokerUnreachableError) as err:
        preflight.require_brokers(f"127.0.0.1:{port}", wait_s=0.6)
    assert f"127.0.0.1:{port} (waited 0.6 s)" in str(err.value)
    assert "local_broker start" in err.value.fix


def test_a_typed_error_raised_in_a_batch_is_one_line_with_its_fix():
    spark_text = (
        "[STREAM_FAILED] Query [id = 1, runId = 2] terminated with exception: ...\n"
        "Traceback (most recent call last):\n"
        '  File "x.py", line 1, in f\n'
        "spark_ext.sinks.errors.TopicMissingError: topic: the output topic 'out' does not exist\n"
        "\tat org.apache.spark.api.python.PythonException\n"
    )
    assert error_line(RuntimeError(spark_text)) == (
        "TopicMissingError: topic: the output topic 'out' does not exist"
    )
    assert error_line(RuntimeError("KeyError: 'x'")) is None  # not ours: the whole trace
    fixed = TopicMissingError("events", "input").with_fix("create it")
    assert error_line(fixed) == (
        "TopicMissingError: topic: the input topic 'events' does not exist; fix: create it"
    )


def test_a_batch_line_has_its_lag_and_the_last_step_its_driver_reached(tmp_path, monkeypatch):
    end = json.dumps({"t": {"0": 5, "1": 7}})
    latest = json.dumps({"t": {"0": 9, "1": 7}})
    assert source_lag([{"endOffset": end, "latestOffset": latest}]) == 4
    assert source_lag([{"endOffset": "{}", "latestOffset": None}]) is None
    monkeypatch.setenv(STEP_DIR_ENV, str(tmp_path))
    declare("talk.1.done", "driver").reached(3)
    declare("talk.2.next", "driver").reached(4)  # the next batch began before 3's line
    assert last_reached(3) == "talk.1.done"
    assert last_reached(3) is None, "read once"
    assert last_reached(4) == "talk.2.next"


def test_run_job_relays_the_jobs_own_lines_as_they_arrive(tmp_path, caplog):
    job = tmp_path / "talking_job.py"
    job.write_text(
        "import logging, time\n"
        f"logging.basicConfig(level=logging.INFO, format={JOB_LOG_FORMAT!r})\n"
        "logging.getLogger('spark_ext.metrics').info('[q] batch 0: 3 rows')\n"
        "logging.getLogger('kafka').info('not relayed')\n"
        "time.sleep(60)\n"
    )
    seen = []

    def relayed_yet() -> bool:
        seen.extend(r.getMessage() for r in caplog.records if "batch 0" in r.getMessage())
        return bool(seen)

    with caplog.at_level(logging.INFO, logger="spark_ext.jobrun"):
        run = run_job("talking_job", cwd=tmp_path, kill_when=relayed_yet, timeout_s=30)
    assert run.killed and run.seconds < 30, "relayed while the job ran, not at its end"
    assert seen[0] == "talking_job: [q] batch 0: 3 rows"
    assert not any("not relayed" in r.getMessage() for r in caplog.records)
    assert relayed("26/11/28 02:13:10 WARN KafkaOffsetReaderAdmin: Error") is None


def test_relative_path_flags_are_made_absolute_against_the_callers_folder(tmp_path, monkeypatch):
    """Executors resolve a relative path in their own working folder (every task failed)."""
    monkeypatch.chdir(tmp_path)
    parser = job_parser("demo", topic="events")
    parser.add_argument("--table", type=location)
    args = parser.parse_args(["--out", "var/out", "--table", "/abs/t", "--topic", "rel"])
    assert args.out == str(tmp_path / "var" / "out") and args.table == "/abs/t"
    assert args.topic == "rel" and not args.traceback and not args.verbose


def test_only_sparks_worker_timeout_restarts_a_job_and_at_most_twice(monkeypatch):
    """The error hook re-executes the job's own command line after Spark's worker timeout (the
    restart itself: tests/spark_ext/tracker/test_tracker_crash.py), never after another error."""
    import os
    import sys

    from jobs import console

    execs: list[list[str]] = []
    monkeypatch.setattr(os, "execv", lambda path, argv: execs.append([path, *argv]))
    monkeypatch.setattr(console.logging, "shutdown", lambda: None)
    monkeypatch.setenv(console.RESTARTS_ENV, "0")  # restored after the test
    timeout = RuntimeError("org.apache.spark.SparkException: Python worker failed to connect back.")
    console.restart_after_worker_timeout("job", RuntimeError("TopicMissingError: topic: gone"))
    assert execs == []
    for _ in range(3):
        console.restart_after_worker_timeout("job", timeout)
    assert execs == [[sys.executable, *sys.orig_argv]] * console.MAX_RESTARTS
    assert os.environ[console.RESTARTS_ENV] == str(console.MAX_RESTARTS)
