"""The Kafka tracking agent on the real broker: end conditions, replays, fencing, kill/restart."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import uuid

import pytest

from spark_ext.jobrun import REPO, job_environment
from spark_ext.tracker.kafka_agent import KafkaEndLog, KafkaTrackingAgent
from tests.spark_ext.tracker.test_tracker_agent import window_batch


def agent_name() -> str:
    return f"t-{uuid.uuid4().hex[:10]}"


def test_kafka_agent_ends_substreams_once_and_a_new_instance_sees_the_same_state(kafka_bootstrap):
    name = agent_name()
    agent = KafkaTrackingAgent(kafka_bootstrap, name)
    agent.declare("w", ["t:0", "t:1"])
    assert agent.apply(window_batch(0, 0, [11, 12], {"t:0": 15_000, "t:1": 9_000})) == []
    ends = agent.apply(window_batch(1, 1, [13], {"t:1": 30_000}))
    assert [(e.seq, e.substream) for e in ends] == [(1, "w/0/10000")]
    # a replayed batch re-sends the same report keys: ignored, no second end event
    assert agent.apply(window_batch(1, 1, [13], {"t:1": 30_000})) == []
    ends = agent.apply(window_batch(2, 2, [14], {"t:0": 40_000}))
    assert [e.seq for e in ends] == [2, 3]

    reopened = KafkaTrackingAgent(kafka_bootstrap, name)  # fences the first instance
    assert reopened.last_seq() == 3
    assert reopened.apply(window_batch(2, 2, [14], {"t:0": 40_000})) == []
    assert reopened.state().open_substreams() == []
    # the source's reader: ranges by sequence number, transaction markers in between
    end_log = KafkaEndLog(kafka_bootstrap, reopened.ends_topic)
    assert end_log.last_seq() == 3
    assert list(end_log.events(0, 3)) == reopened.end_events(0, 3)
    assert [e.seq for e in end_log.events(1, 3)] == [2, 3]
    assert list(end_log.events(3, 3)) == []
    for a in (agent, reopened):
        a.close()


def test_two_instances_of_one_agent_serialise_through_fencing(kafka_bootstrap):
    """Two writers (e.g. two queries on two machines) share one agent: each write fences the
    other, which catches up before its next write -- no report lost, no sequence number reused."""
    name = agent_name()
    a = KafkaTrackingAgent(kafka_bootstrap, name)
    a.declare("w", ["t:0"])
    b = KafkaTrackingAgent(kafka_bootstrap, name)
    got = []
    for batch, agent in enumerate([a, b, a, b]):
        got += agent.apply(window_batch(batch, batch, [7 + batch], {"t:0": (batch + 1) * 10_000}))
    assert [e.seq for e in got] == [1, 2, 3, 4]
    assert len({e.substream for e in got}) == 4
    assert a.end_events(0, 10) == b.end_events(0, 10) == got
    for agent in (a, b):
        agent.close()


SCRIPT = textwrap.dedent(
    """
    import json, sys
    from spark_ext.tracker.kafka_agent import KafkaTrackingAgent
    from tests.spark_ext.tracker.test_tracker_agent import window_batch
    agent = KafkaTrackingAgent(sys.argv[1], sys.argv[2])
    agent.declare("w", ["t:0"])
    for b in range(5):
        ends = agent.apply(window_batch(b, b, [100 + b, 200 + b], {"t:0": (b + 1) * 10_000}))
        print(json.dumps([e.to_list() for e in ends]), flush=True)
    """
)


def run_agent(bootstrap, name, fault=None):
    env = job_environment({"SPARK_EXT_FAULT": fault} if fault else {})
    return subprocess.run(
        [sys.executable, "-c", SCRIPT, bootstrap, name],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
        start_new_session=True,
    )


@pytest.mark.crash
def test_kafka_agent_killed_between_steps_loses_no_report_and_repeats_no_end_event(
    kafka_bootstrap,
):
    """Killed after sending its records but before committing them (an open transaction the
    restart aborts), and killed right after committing (the re-sent reports are duplicates)."""
    clean_name = agent_name()
    clean = run_agent(kafka_bootstrap, clean_name)
    assert clean.returncode == 0, clean.stderr
    expected = KafkaEndLog(kafka_bootstrap, f"spark_ext.tracker.{clean_name}.ends")
    expected_events = list(expected.events(0, expected.last_seq()))
    assert len(expected_events) == 5

    for point in ("tracker.agent.before_commit@2", "tracker.agent.after_commit@3"):
        name = agent_name()
        killed = run_agent(kafka_bootstrap, name, fault=point)
        assert killed.returncode == -9, killed.stderr  # SIGKILL at the crash point
        again = run_agent(kafka_bootstrap, name)  # re-sends every batch from the start
        assert again.returncode == 0, again.stderr

        ends = KafkaEndLog(kafka_bootstrap, f"spark_ext.tracker.{name}.ends")
        assert ends.last_seq() == 5
        assert list(ends.events(0, 5)) == expected_events  # nothing aborted is visible
        returned = [
            e[0]
            for line in (killed.stdout + again.stdout).splitlines()
            if line
            for e in json.loads(line)
        ]
        assert len(returned) == len(set(returned)), point  # no end event handed out twice
        assert set(returned) <= {1, 2, 3, 4, 5}


def test_a_bug_in_the_agent_surfaces_as_itself_not_as_tracker_unavailable(kafka_bootstrap):
    """Only Kafka's own failures are retried; a bug was retried four times and reported as
    ``TrackerUnavailable``, hiding its type and its trace."""
    agent = KafkaTrackingAgent(kafka_bootstrap, agent_name())
    calls = []

    def broken(state):
        calls.append(state)
        raise KeyError("a bug, not an outage")

    with pytest.raises(KeyError, match="a bug"):
        agent._transact(broken, batch=0)
    assert len(calls) == 1


def test_a_batch_whose_log_record_passes_kafkas_1_mb_limit_is_applied_and_replayed(
    kafka_bootstrap,
):
    """Issue #12, scale: one batch's log record is one Kafka record, and above Kafka's 1 MB
    default (about 18k report entries) every attempt failed -- the query could never pass the
    batch. Here a backlog batch touches 40,000 windows (a ~3 MB record)."""
    from spark_ext.tracker.reports import TaskReport, batch_reports

    name = agent_name()
    agent = KafkaTrackingAgent(kafka_bootstrap, name)
    agent.declare("w", ["t:0"])
    windows = [f"w/{i * 10_000}/{(i + 1) * 10_000}" for i in range(40_000)]
    ends = [(i + 1) * 10_000 for i in range(40_000)]
    labels = [1_000_003 * (i + 1) for i in range(40_000)]
    sent = TaskReport("assign", 0)
    sent.add_labels(windows, labels, sent=True, ends=ends)
    sent.add_progress("t:0", 40_001 * 10_000)  # past every window's end
    done = TaskReport("operator", 0)
    done.add_labels(windows[:-1], labels[:-1], sent=False)  # the last one still in flight
    reports = batch_reports("q", 0, [sent, done])
    assert len(json.dumps([r.to_dict() for r in reports])) > 2_000_000

    got = agent.apply(reports)
    assert [e.seq for e in got] == list(range(1, 40_000))  # every window but the last
    reopened = KafkaTrackingAgent(kafka_bootstrap, name)
    state = reopened.state()
    assert (state.seq, state.open_substreams()) == (39_999, [windows[-1]])
    assert reopened.apply(reports) == []  # the replayed batch is a duplicate
    for a in (agent, reopened):
        a.close()
