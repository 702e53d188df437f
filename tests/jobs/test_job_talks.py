"""A real job process talks to its user (docs/design.md, "A job that talks"): bad input is one
line before any JVM starts; Ctrl-C stops it after the batch in flight with exit 130 and one
line, leaving the output of exactly the batches it committed."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from deltalake import DeltaTable

from connectors.demo_events import produce_events
from jobs.console import INTERRUPTED
from spark_ext.jobrun import job_environment

pytestmark = pytest.mark.integration

JOB = "jobs.exactly_once_delta"


def run(args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", JOB, *args],
        cwd=cwd,
        env=job_environment(),
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_bad_input_is_one_line_before_any_jvm_starts(kafka_bootstrap, new_topic, tmp_path):
    topic = new_topic("talk", partitions=1)
    (tmp_path / "a-file").write_text("x")
    common = ["--bootstrap", kafka_bootstrap, "--sink-id", "talk", "--checkpoint", "cp"]
    cases = {
        "TopicMissingError: topic: the input topic 'no-such-topic' does not exist; fix: ": [
            "--topic",
            "no-such-topic",
            "--table",
            "t",
        ],
        f"DeltaTargetPathError: path: {tmp_path / 'a-file'} is a file": [
            "--topic",
            topic,
            "--table",
            "a-file",
        ],
    }
    for expected, args in cases.items():
        done = run([*common, *args], tmp_path)
        said = done.stdout + done.stderr
        assert done.returncode == 1, said
        lines = [line for line in said.splitlines() if " jobs.console " in line]
        assert len(lines) == 1 and expected in lines[0], said
        assert "Traceback" not in said and "SparkSession" not in said, said
    assert not (tmp_path / "t").exists(), "no table is made for a missing topic"
    done = run([*common, "--topic", "no-such-topic", "--table", "t", "--traceback"], tmp_path)
    assert "Traceback" in done.stderr and "TopicMissingError" in done.stderr.splitlines()[-1]


def test_ctrl_c_stops_after_the_batch_in_flight(kafka_bootstrap, new_topic, tmp_path):
    topic = new_topic("talk-int", partitions=1)
    produce_events(kafka_bootstrap, topic, 40, partitions=1)
    table, checkpoint = tmp_path / "t", tmp_path / "cp"
    args = ["--topic", topic, "--table", str(table), "--checkpoint", str(checkpoint)]
    proc = subprocess.Popen(
        [sys.executable, "-m", JOB, *args, "--sink-id", "talk", "--max-offsets-per-trigger", "5"],
        cwd=tmp_path,
        env=job_environment(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,  # a terminal's Ctrl-C: SIGINT to the whole process group
    )
    said, rows = [], {}
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            said.append(line)
            if m := re.search(r"\] batch (\d+): (\d+) rows, step (\S+), lag (\d+)", line):
                rows[int(m.group(1))] = int(m.group(2))
                assert m.group(3).startswith("delta2pc."), line  # the sink's last step
                if len(rows) == 1:
                    os.killpg(proc.pid, signal.SIGINT)
                    sent = time.monotonic()
        returncode = proc.wait(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    text = "".join(said)
    assert returncode == INTERRUPTED, text
    stops = [line for line in said if "interrupted (Ctrl-C): stopped" in line]
    assert len(stops) == 1, text
    last = int(re.search(r"after batch (\d+)", stops[0]).group(1))
    assert "Traceback" not in text and "Py4J" not in text, text
    assert time.monotonic() - sent < 60
    # Exactly the batches it reported, each once; Spark's commit log agrees.
    assert sorted(rows) == list(range(last + 1)) and 0 < last + 1 < 8, text
    committed = sorted(int(p.name) for p in (checkpoint / "commits").iterdir() if p.name.isdigit())
    assert committed[-1] == last
    offsets = DeltaTable(str(table)).to_pyarrow_table(columns=["offset"]).column(0).to_pylist()
    assert sorted(offsets) == list(range(sum(rows.values())))
