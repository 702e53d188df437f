"""The tracking agent: end conditions, idempotent reports, durability across a kill (no Spark)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

from spark_ext.jobrun import REPO, job_environment
from spark_ext.tracker.agent import LocalTrackingAgent, TrackerState
from spark_ext.tracker.errors import TrackerLogCorrupt
from spark_ext.tracker.reports import TaskReport, batch_reports


def window_batch(batch: int, window_s: int, labels: list[int], progress: dict[str, int]):
    """Reports of one batch: the assign stage sent ``labels`` into window ``window_s``
    (10 s wide) and the operator finished them; the partitions advanced to ``progress``."""
    start = window_s * 10_000
    sub = f"w/{start}/{start + 10_000}"
    sent = TaskReport("assign", 0)
    sent.add_labels([sub] * len(labels), labels, sent=True, ends=[start + 10_000] * len(labels))
    for p, t in progress.items():
        sent.add_progress(p, t)
    done = TaskReport("operator", 0)
    done.add_labels([sub] * len(labels), labels, sent=False)
    return batch_reports("q", batch, [sent, done])


def test_substream_ends_when_every_partition_closed_it_and_xor_is_zero(tmp_path):
    agent = LocalTrackingAgent(tmp_path)
    agent.declare("w", ["t:0", "t:1"])
    # partition 0 passed the window end, partition 1 did not: still open
    assert agent.apply(window_batch(0, 0, [11, 12], {"t:0": 15_000, "t:1": 9_000})) == []
    # partition 1 is idle from now on; its producer's close marker closes it
    ends = agent.apply(window_batch(1, 1, [13], {"t:1": 30_000}))
    assert [e.substream for e in ends] == ["w/0/10000"]
    assert ends[0].seq == 1
    ends = agent.apply(window_batch(2, 2, [14], {"t:0": 40_000}))
    assert [(e.seq, e.substream) for e in ends] == [(2, "w/10000/20000"), (3, "w/20000/30000")]


def test_state_size_figures_count_open_substreams_and_elements_in_flight(tmp_path):
    agent = LocalTrackingAgent(tmp_path)
    agent.declare("w", ["t:0"])
    sent = TaskReport("assign", 0)
    sent.add_labels(["w/0/10000"] * 3, [1, 2, 3], sent=True, ends=[10_000] * 3)
    sent.add_progress("t:0", 10_000)
    agent.apply(batch_reports("q", 0, [sent]))
    f = agent.figures()
    assert (f.open_substreams, f.in_flight, f.ended, f.last_seq) == (1, 3, 0, 0)
    done = TaskReport("operator", 0)
    done.add_labels(["w/0/10000"] * 3, [1, 2, 3], sent=False)
    assert len(agent.apply(batch_reports("q", 1, [done]))) == 1
    f = agent.figures()
    assert (f.open_substreams, f.in_flight, f.ended, f.last_seq) == (0, 0, 1, 1)


def test_substreams_of_a_namespace_end_in_end_time_order(tmp_path):
    state = TrackerState()
    state.declare("w", ["t:0"])
    sent = TaskReport("assign", 0)
    sent.add_labels(["w/0/10000", "w/10000/20000"], [1, 2], sent=True, ends=[10_000, 20_000])
    sent.add_progress("t:0", 25_000)
    done = TaskReport("operator", 0)
    done.add_labels(["w/10000/20000"], [2], sent=False)  # the earlier window is still in flight
    state.accept(batch_reports("q", 0, [sent, done]))
    assert state.settle() == []
    late = TaskReport("operator", 0)
    late.add_labels(["w/0/10000"], [1], sent=False)
    state.accept(batch_reports("q", 1, [late]))
    assert [e.substream for e in state.settle()] == ["w/0/10000", "w/10000/20000"]


def test_replayed_batch_reports_are_ignored_and_emit_no_second_end_event(tmp_path):
    agent = LocalTrackingAgent(tmp_path)
    agent.declare("w", ["t:0"])
    first = agent.apply(window_batch(0, 0, [5, 6], {"t:0": 10_000}))
    assert len(first) == 1
    assert agent.apply(window_batch(0, 0, [5, 6], {"t:0": 10_000})) == []
    reopened = LocalTrackingAgent(tmp_path)
    assert reopened.apply(window_batch(0, 0, [5, 6], {"t:0": 10_000})) == []
    assert reopened.last_seq() == 1
    assert reopened.end_events(0, 1) == first


def test_torn_last_record_is_discarded_and_a_corrupt_middle_record_is_an_error(tmp_path):
    agent = LocalTrackingAgent(tmp_path)
    agent.declare("w", ["t:0"])
    agent.apply(window_batch(0, 0, [5], {"t:0": 10_000}))
    with open(agent.path, "ab") as f:
        f.write(b'{"t":"apply","reports":[{"key"')  # a writer killed mid-append
    reopened = LocalTrackingAgent(tmp_path)
    assert reopened.last_seq() == 1
    assert agent.path.read_bytes().endswith(b"\n")

    lines = agent.path.read_bytes().splitlines(keepends=True)
    agent.path.write_bytes(lines[0] + b"garbage\n" + b"".join(lines[1:]))
    with pytest.raises(TrackerLogCorrupt):
        LocalTrackingAgent(tmp_path)


SCRIPT = textwrap.dedent(
    """
    import json, sys
    from spark_ext.tracker.agent import LocalTrackingAgent
    from tests.spark_ext.tracker.test_tracker_agent import window_batch
    agent = LocalTrackingAgent(sys.argv[1])
    agent.declare("w", ["t:0"])
    for b in range(6):
        ends = agent.apply(window_batch(b, b, [100 + b, 200 + b], {"t:0": (b + 1) * 10_000}))
        print(json.dumps([e.to_list() for e in ends]), flush=True)
    """
)


def run_agent(folder, fault=None, script=SCRIPT, env=None):
    """``script`` on the agent ``folder`` in a process of its own (``env``: fault settings)."""
    env = job_environment(env or ({"SPARK_EXT_FAULT": fault} if fault else {}))
    return subprocess.run(
        [sys.executable, "-c", script, str(folder)],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        start_new_session=True,  # the crash point kills its own process group only
    )


@pytest.mark.crash
@pytest.mark.parametrize("point", ["tracker.agent.before_append@3", "tracker.agent.after_append@3"])
def test_agent_killed_and_restarted_loses_no_report_and_repeats_no_end_event(tmp_path, point):
    clean = run_agent(tmp_path / "clean")
    assert clean.returncode == 0, clean.stderr
    expected = LocalTrackingAgent(tmp_path / "clean").end_events(0, 10**9)

    killed = run_agent(tmp_path / "crash", fault=point)
    assert killed.returncode == -9, killed.stderr  # SIGKILL at the crash point
    # The sender re-sends everything from its last acknowledged report (a replayed batch).
    again = run_agent(tmp_path / "crash")
    assert again.returncode == 0, again.stderr

    got = LocalTrackingAgent(tmp_path / "crash").end_events(0, 10**9)
    assert got == expected
    assert len({e.substream for e in got}) == len(got) == 6
    published = [json.loads(line) for line in (killed.stdout + again.stdout).splitlines() if line]
    returned = [e[0] for batch in published for e in batch]
    assert len(returned) == len(set(returned))  # no end event handed out twice
    assert set(returned) <= {e.seq for e in expected}


def test_a_failed_append_leaves_the_agent_as_its_log_says_without_copying_state_per_batch(
    tmp_path, monkeypatch
):
    """apply() no longer deep-copies the whole state every batch (item 5 of issue 12): a
    failed append rebuilds the state from the log instead, so the reports count as unapplied."""
    import copy as copy_module

    from spark_ext.tracker.reports import Report, ReportKey, TaskReport

    agent = LocalTrackingAgent(tmp_path)
    agent.declare("w", ["t:0"])

    def report(batch: int, t: int) -> Report:
        body = TaskReport(
            "assign", 0, xors={f"w/{t}/{t + 10}": 0}, ends={f"w/{t}/{t + 10}": t + 10}
        )
        body.progress["t:0"] = t + 10
        return Report(ReportKey("q", batch, "assign", 0), body)

    copies = []
    monkeypatch.setattr(copy_module, "deepcopy", lambda *a, **k: copies.append(1) or a[0])
    assert [e.substream for e in agent.apply([report(0, 0)])] == ["w/0/10"]
    assert copies == []

    def broken(record):
        raise OSError("disk full")

    monkeypatch.setattr(agent, "_append", broken)
    with pytest.raises(OSError):
        agent.apply([report(1, 10)])
    monkeypatch.undo()
    assert agent.last_seq() == 1 and not agent._state.is_duplicate(ReportKey("q", 1, "assign", 0))
    assert [e.substream for e in agent.apply([report(1, 10)])] == ["w/10/20"]  # re-sent: applied


def test_ended_substreams_are_not_kept_and_a_report_below_the_released_frontier_is_late():
    """The state keeps one released frontier per namespace, not every ended substream; a
    report for a substream below it (never seen before) is late -- it used to open a new
    substream that nothing could end, blocking every later window of the namespace."""
    from spark_ext.tracker.agent import TrackerState
    from spark_ext.tracker.reports import Report, ReportKey, TaskReport

    state = TrackerState()
    state.declare("w", ["t:0"])

    def report(batch: int, window: int, progress: int) -> Report:
        sid = f"w/{window}/{window + 10}"
        body = TaskReport("assign", 0, xors={sid: 5}, counts={sid: 1}, ends={sid: window + 10})
        body.progress["t:0"] = progress
        return Report(ReportKey("q", batch, "assign", 0), body)

    def finished(batch: int, window: int) -> Report:
        sid = f"w/{window}/{window + 10}"
        return Report(
            ReportKey("q", batch, "operator", 0),
            TaskReport("operator", 0, xors={sid: 5}, counts={sid: -1}),
        )

    for b in range(100):
        state.accept([report(b, b * 10, b * 10 + 10), finished(b, b * 10)])
        assert len(state.settle()) == 1
    assert state.figures().ended == 100 and len(state.xors) == len(state.ends) == 0
    assert not hasattr(state, "ended") or len(state.ended) < 100  # bounded, not one per window
    state.accept([report(100, 5, 1000)])  # window [5, 15): never seen, long released
    assert state.late_reports == 1 and state.open_substreams() == []
    state.accept([report(101, 1000, 1010), finished(101, 1000)])
    assert [e.substream for e in state.settle()] == ["w/1000/1010"]  # not blocked


@pytest.mark.parametrize("folder", ["s3a://bucket/tracker", "hdfs://nn/tracker"])
def test_a_local_agent_off_the_local_disk_is_a_typed_error_naming_the_kafka_agent(folder, tmp_path):
    from spark_ext.errors import ConfigError

    with pytest.raises(ConfigError, match=r"LocalTrackingAgent\(folder\).*KafkaTrackingAgent"):
        LocalTrackingAgent(folder)
    assert LocalTrackingAgent(f"file://{tmp_path}/agent").folder == tmp_path / "agent"
