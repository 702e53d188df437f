"""A tracked query's start-up checks on a checkpoint in the local S3 store: the same typed errors
as on a local checkpoint (tests/spark_ext/streaming/test_tracked_start_checks.py)."""

from __future__ import annotations

import json

import pytest

from spark_ext import storage
from spark_ext.storage import Location, StorageSettings
from spark_ext.streaming.checks import (
    LAYOUT_FILE,
    check_agent_and_checkpoint,
    check_layout,
    read_end_seq,
)
from spark_ext.tracker.agent import TrackerState
from spark_ext.tracker.errors import (
    AgentBehindCheckpoint,
    CheckpointBehindAgent,
    CheckpointLayoutMismatch,
)
from tests.spark_ext.streaming.test_tracked_start_checks import agent_after, checkpoint, layout

pytestmark = pytest.mark.integration


def test_a_reset_checkpoint_on_s3_is_a_typed_error_at_start(
    s3_root: Location, s3_settings: StorageSettings
) -> None:
    reset = checkpoint(s3_root.join("reset"), None, settings=s3_settings)
    assert reset.startswith("s3a://")
    with pytest.raises(CheckpointBehindAgent, match="reset"):
        check_agent_and_checkpoint(agent_after("q", 6), "q", reset, s3_settings)

    chk = checkpoint(s3_root.join("chk"), 4, end_seq=7, planned=5, settings=s3_settings)
    assert read_end_seq(chk, s3_settings) == 7
    check_agent_and_checkpoint(agent_after("q", 6, ends=7), "q", chk, s3_settings)  # a replay
    with pytest.raises(AgentBehindCheckpoint, match="lost"):
        check_agent_and_checkpoint(TrackerState(), "q", chk, s3_settings)


def test_a_checkpoint_on_s3_records_its_layout_and_refuses_another_one(
    s3_root: Location, s3_settings: StorageSettings
) -> None:
    chk = storage.spark_uri(s3_root.join("chk"))
    check_layout(chk, layout(), s3_settings)  # new: recorded
    record = storage.read_bytes(s3_root.join("chk", LAYOUT_FILE), s3_settings)
    assert json.loads(record)["shards"] == 2
    checkpoint(chk, 0, settings=s3_settings)
    check_layout(chk, layout(), s3_settings)
    with pytest.raises(CheckpointLayoutMismatch, match=r"shards=5.*shards=2"):
        check_layout(chk, layout(shards=5), s3_settings)

    batches_only = checkpoint(s3_root.join("old"), 2, settings=s3_settings)
    with pytest.raises(CheckpointLayoutMismatch, match=r"no spark_ext_tracked\.json"):
        check_layout(batches_only, layout(), s3_settings)


def test_the_checks_reach_s3_with_the_active_sessions_settings(
    s3_spark, s3_root: Location, s3_settings: StorageSettings
) -> None:
    assert storage.session_settings() == s3_settings
    chk = checkpoint(s3_root.join("chk"), None, settings=s3_settings)
    with pytest.raises(CheckpointBehindAgent):
        check_agent_and_checkpoint(agent_after("q", 3), "q", chk)  # no settings given
