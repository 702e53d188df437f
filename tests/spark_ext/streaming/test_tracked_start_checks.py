"""Operational mistakes are typed errors at start, never a silent stall or a silent loss."""

from __future__ import annotations

import json

import pytest

from spark_ext import storage
from spark_ext.errors import ConfigError
from spark_ext.operators import Count, WindowAggregate
from spark_ext.storage import Location, StorageSettings
from spark_ext.streaming import Closing
from spark_ext.streaming.checks import (
    LAYOUT_FILE,
    check_agent_and_checkpoint,
    check_layout,
    check_partitions,
)
from spark_ext.streaming.envelope import REASON_UNDECLARED
from spark_ext.streaming.tester import PipelineTester
from spark_ext.tracker import Tumbling
from spark_ext.tracker.agent import EndEvent, TrackerState
from spark_ext.tracker.errors import (
    AgentBehindCheckpoint,
    CheckpointBehindAgent,
    CheckpointLayoutMismatch,
    PartitionSetMismatch,
)
from spark_ext.tracker.reports import Report, ReportKey, TaskReport


def agent_after(query: str, batches: int, ends: int = 0) -> TrackerState:
    state = TrackerState()
    state.accept(
        Report(ReportKey(query, b, "assign", 0), TaskReport("assign", 0, progress={"t:0": b}))
        for b in range(batches)
    )
    state.replay_ends(EndEvent(i + 1, f"w/{i}/{i + 1}", i, i + 1) for i in range(ends))
    return state


def checkpoint(
    root,
    committed: int | None,
    end_seq: int = 0,
    planned: int | None = None,
    settings: StorageSettings | None = None,
) -> str:
    """A checkpoint at ``root`` (any storage location) whose batches up to ``committed`` are
    committed and up to ``planned`` (default: ``committed``) are in the offset log; its URI."""
    loc = Location.parse(root)
    planned = committed if planned is None else planned
    for b in range((planned if planned is not None else -1) + 1):
        if committed is not None and b <= committed:
            storage.write_bytes(loc.join("commits", str(b)), b"v1\n{}\n", settings)
        lines = ["v1", json.dumps({"batchWatermarkMs": 0}), json.dumps({"t": {"0": b}})]
        lines.append(json.dumps({"seq": end_seq}))
        storage.write_bytes(
            loc.join("offsets", str(b)), ("\n".join(lines) + "\n").encode(), settings
        )
    return storage.spark_uri(loc)


def test_a_reset_checkpoint_with_the_agent_kept_is_a_typed_error_at_start(tmp_path):
    with pytest.raises(CheckpointBehindAgent, match="reset"):
        check_agent_and_checkpoint(agent_after("q", 6), "q", checkpoint(tmp_path, None))


def test_an_agent_one_batch_ahead_of_the_checkpoint_is_a_replay_not_an_error(tmp_path):
    # killed after the reports of batch 5 were applied, before Spark committed batch 5
    check_agent_and_checkpoint(agent_after("q", 6), "q", checkpoint(tmp_path, 4, planned=5))
    check_agent_and_checkpoint(agent_after("other", 9), "q", str(tmp_path / "fresh"))
    # killed in batch 0 after its reports were applied: the offset log holds batch 0 only
    check_agent_and_checkpoint(
        agent_after("q", 1), "q", checkpoint(tmp_path / "b0", None, planned=0)
    )


def test_a_checkpoint_reset_after_the_agent_applied_only_batch_0_is_a_typed_error(tmp_path):
    # The agent applied batch 0 of the old checkpoint; the new one has not planned it (found
    # by the campaign: seed 32 of tracker_windows, a second query from a deleted checkpoint).
    with pytest.raises(CheckpointBehindAgent, match="reset"):
        check_agent_and_checkpoint(agent_after("q", 1), "q", str(tmp_path / "new"))
    with pytest.raises(CheckpointBehindAgent, match="reset"):
        check_agent_and_checkpoint(agent_after("q", 6), "q", checkpoint(tmp_path, 4))


def test_a_lost_agent_with_the_checkpoint_kept_is_a_typed_error_at_start(tmp_path):
    chk = checkpoint(tmp_path, 3, end_seq=7)
    check_agent_and_checkpoint(agent_after("q", 4, ends=7), "q", chk)  # the right agent
    with pytest.raises(AgentBehindCheckpoint, match="lost"):
        check_agent_and_checkpoint(TrackerState(), "q", chk)


@pytest.mark.parametrize("declared", [4, 2])
def test_a_declared_partition_set_that_is_not_the_topics_is_a_typed_error(declared):
    sources = Closing.partitions("t", declared).sources
    with pytest.raises(PartitionSetMismatch, match=r"0\.\.2"):
        check_partitions(sources, {"t": 3})
    check_partitions(Closing.partitions("t", 3).sources, {"t": 3})


def test_rows_of_an_undeclared_partition_go_to_late_and_windows_still_end():
    t = PipelineTester(
        WindowAggregate(Count()), Tumbling(10_000, namespace="w"), Closing.partitions("src", 1)
    )
    _, late = t.run_batch(
        [
            {"partition": 0, "offset": 0, "key": "a", "event_time_ms": 1_000},
            {"partition": 1, "offset": 0, "key": "a", "event_time_ms": 2_000},
        ]
    )
    assert late[["src_partition", "reason"]].values.tolist() == [[1, REASON_UNDECLARED]]
    got, _ = t.run_batch(
        [{"partition": 0, "offset": 1, "key": None, "event_time_ms": None, "close": 10**6}]
    )
    assert got["count"].tolist() == [1]
    assert t.agent.open_substreams() == [] and t.groups == {}


def test_the_tracked_jobs_delta_writer_needs_an_explicit_idempotence_key():
    from connectors.delta.idempotent import DeltaIdempotentWriter

    with pytest.raises(ConfigError, match="sink_id"):
        DeltaIdempotentWriter("/tmp/table", "")
    with pytest.raises(TypeError):
        DeltaIdempotentWriter("/tmp/table")  # type: ignore[call-arg]  (never the table path)


def test_an_operator_column_named_like_a_pipeline_column_is_a_typed_error_at_plan_time():
    from spark_ext.streaming.query import TrackedQuery

    query = TrackedQuery(None, Tumbling(10), WindowAggregate(Count(name="reason")), "q", 2)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="reason"):
        query._output_schema()


def layout(**changes):
    return {"shards": 2, "windowing": "Tumbling(namespace='w', size=10000)", **changes}


def test_a_checkpoint_records_its_layout_and_refuses_another_one(tmp_path):
    chk = str(tmp_path / "chk")
    check_layout(chk, layout())  # new: recorded
    assert json.loads((tmp_path / "chk" / LAYOUT_FILE).read_text())["shards"] == 2
    check_layout(chk, layout(shards=5))  # no batch yet (a start killed early): re-recorded
    checkpoint(tmp_path / "chk", 0)
    check_layout(chk, layout(shards=5))
    with pytest.raises(CheckpointLayoutMismatch, match=r"shards=5.*shards=2"):
        check_layout(chk, layout(shards=2))
    with pytest.raises(CheckpointLayoutMismatch, match="windowing"):
        check_layout(chk, layout(shards=5, windowing="Tumbling(namespace='w', size=20000)"))


def test_a_checkpoint_with_batches_and_no_layout_record_is_a_typed_error(tmp_path):
    chk = checkpoint(tmp_path, 2)  # an older spark_ext version's, or an untracked query's
    with pytest.raises(CheckpointLayoutMismatch, match=r"no spark_ext_tracked\.json"):
        check_layout(chk, layout())
    check_layout("hdfs://nn/chk", layout())  # a scheme spark_ext.storage does not read: skipped
