"""The local agent's compaction: bounded restart and disk, end events served exactly, crashes.

Pure (no Spark). Thresholds are set through the module constants so that the same tests
run against an agent without compaction and fail there on what they measure.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import textwrap
from pathlib import Path

import pytest

import spark_ext.tracker.agent as agent_module
import spark_ext.tracker.snapshot as snapshot_module
from spark_ext.tracker.agent import LocalTrackingAgent
from tests.spark_ext.tracker.test_tracker_agent import run_agent as run_script
from tests.spark_ext.tracker.test_tracker_agent import window_batch

EVERY = 20


@pytest.fixture(autouse=True)
def small_thresholds(monkeypatch):
    """Compact every 20 records and roll end-event files every 7 events."""
    monkeypatch.setattr(agent_module, "SNAPSHOT_EVERY", EVERY, raising=False)
    monkeypatch.setattr(snapshot_module, "SEGMENT_EVENTS", 7, raising=False)


def run_batches(folder: Path, first: int, last: int) -> None:
    """Batches ``first..last-1``: batch ``b`` fills window ``b`` and closes it."""
    agent = LocalTrackingAgent(folder)
    agent.declare("w", ["t:0"])
    for b in range(first, last):
        agent.apply(window_batch(b, b, [100 + b, 200 + b], {"t:0": (b + 1) * 10_000}))


def records_replayed_at_open(folder: Path, monkeypatch) -> int:
    calls = []
    real = agent_module.replay_record
    monkeypatch.setattr(agent_module, "replay_record", lambda s, r: calls.append(1) or real(s, r))
    LocalTrackingAgent(folder)
    monkeypatch.setattr(agent_module, "replay_record", real)
    return len(calls)


def agent_bytes(folder: Path) -> int:
    """Bytes of the agent's log and snapshots (the end-event files grow by design)."""
    return sum(p.stat().st_size for p in folder.iterdir() if p.is_file())


def test_restart_replays_a_bounded_tail_whatever_the_number_of_past_batches(tmp_path, monkeypatch):
    run_batches(tmp_path / "a", 0, 60)
    run_batches(tmp_path / "b", 0, 600)
    few = records_replayed_at_open(tmp_path / "a", monkeypatch)
    many = records_replayed_at_open(tmp_path / "b", monkeypatch)
    assert few <= EVERY and many <= EVERY, (few, many)  # not 61 and 601
    reopened = LocalTrackingAgent(tmp_path / "b")
    assert reopened.last_seq() == 600 and reopened.state().figures().ended == 600


def test_agent_folder_bytes_stay_bounded_over_many_batches(tmp_path):
    run_batches(tmp_path, 0, 100)
    after_100 = agent_bytes(tmp_path)
    run_batches(tmp_path, 100, 1000)
    after_1000 = agent_bytes(tmp_path)
    assert after_1000 < 2 * after_100, (after_100, after_1000)  # not 10x
    assert len(list(tmp_path.glob("snapshot.*.json"))) <= 2


def test_end_events_are_the_same_with_and_without_compaction(tmp_path, monkeypatch):
    run_batches(tmp_path / "compacted", 0, 90)
    monkeypatch.setattr(agent_module, "SNAPSHOT_EVERY", 10**9, raising=False)
    run_batches(tmp_path / "plain", 0, 90)
    plain = LocalTrackingAgent(tmp_path / "plain")
    compacted = LocalTrackingAgent(tmp_path / "compacted")
    assert list((tmp_path / "compacted").glob("snapshot.*.json")), "no compaction happened"
    assert compacted.state() == plain.state()
    assert compacted.end_events(0, 10**9) == plain.end_events(0, 10**9)
    for after, up_to in [(0, 1), (6, 7), (7, 8), (13, 29), (40, 90), (89, 90), (90, 95)]:
        want = plain.end_events(after, up_to)
        assert compacted.end_events(after, up_to) == want


def test_a_torn_newest_snapshot_is_ignored_for_the_previous_one(tmp_path):
    run_batches(tmp_path / "a", 0, 50)
    expected = LocalTrackingAgent(tmp_path / "a").state()
    newest = sorted((tmp_path / "a").glob("snapshot.*.json"))[-1]
    blob = newest.read_bytes()
    newest.write_bytes(blob[: len(blob) // 2])  # a partial copy
    assert LocalTrackingAgent(tmp_path / "a").state() == expected


def test_an_uncompacted_log_of_an_older_version_still_loads_and_serves_end_events(tmp_path):
    old = tmp_path / "old"
    old.mkdir()
    scratch = tmp_path / "scratch"
    run_batches(scratch, 0, 5)  # below EVERY: one segment, tracker.log
    lines = (scratch / "tracker.log").read_text().splitlines()
    (old / "tracker.log").write_text("\n".join(lines) + "\n")  # no snapshot, no ends/
    agent = LocalTrackingAgent(old)
    assert [e.seq for e in agent.end_events(2, 5)] == [3, 4, 5]
    assert agent.state() == LocalTrackingAgent(scratch).state()


def test_the_source_ships_local_end_events_with_the_partition(tmp_path):
    """Executors need no access to the agent's folder: the driver reads the end events."""
    from spark_ext.tracker.source import TrackerEndReader

    run_batches(tmp_path / "a", 0, 12)
    reader = TrackerEndReader({"agent": "local", "path": str(tmp_path / "a")})
    end = reader.latestOffset()
    (part,) = reader.partitions({"seq": 3}, end)
    shutil.rmtree(tmp_path / "a")  # an executor on another machine: no folder
    rows = list(reader.read(part))
    assert [r[0] for r in rows] == list(range(4, 13)) and rows[0][1] == "w/30000/40000"


SCRIPT = textwrap.dedent(
    """
    import json, sys
    import spark_ext.tracker.agent as agent_module
    import spark_ext.tracker.snapshot as snapshot_module
    from spark_ext.tracker.agent import LocalTrackingAgent
    from tests.spark_ext.tracker.test_tracker_agent import window_batch
    agent_module.SNAPSHOT_EVERY = 4
    snapshot_module.SEGMENT_EVENTS = 3
    agent = LocalTrackingAgent(sys.argv[1])
    agent.declare("w", ["t:0"])
    for b in range(12):
        ends = agent.apply(window_batch(b, b, [100 + b, 200 + b], {"t:0": (b + 1) * 10_000}))
        print(json.dumps([e.to_list() for e in ends]), flush=True)
    """
)


def run_agent(folder: Path, fault: str | None = None) -> subprocess.CompletedProcess[str]:
    return run_script(folder, script=SCRIPT, env={"SPARK_EXT_FAULT": fault} if fault else None)


@pytest.mark.crash
@pytest.mark.parametrize(
    "point",
    [
        "tracker.agent.before_ends@5:kill",
        "tracker.agent.before_snapshot@6:kill",
        "tracker.agent.after_snapshot@6:kill",
        "tracker.agent.after_snapshot@6:raise",
    ],
)
def test_a_crash_at_each_compaction_step_loses_nothing_and_repeats_nothing(tmp_path, point):
    clean = run_agent(tmp_path / "clean")
    assert clean.returncode == 0, clean.stderr
    expected = LocalTrackingAgent(tmp_path / "clean", snapshot_every=10**9)

    failed = run_agent(tmp_path / "crash", fault=point)
    assert failed.returncode == (-9 if point.endswith(":kill") else 1), failed.stderr
    again = run_agent(tmp_path / "crash")  # the sender re-sends every batch
    assert again.returncode == 0, again.stderr

    got = LocalTrackingAgent(tmp_path / "crash", snapshot_every=10**9)
    assert got.state() == expected.state()
    assert got.end_events(0, 10**9) == expected.end_events(0, 10**9)
    assert len(got.end_events(0, 10**9)) == 12
    published = [json.loads(line) for line in (failed.stdout + again.stdout).splitlines() if line]
    returned = [e[0] for batch in published for e in batch]
    assert len(returned) == len(set(returned))  # no end event handed out twice
