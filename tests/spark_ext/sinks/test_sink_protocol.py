"""The commit protocol as pure logic: step order, replay skip, crash-point names (no Spark)."""

from __future__ import annotations

import pytest

from spark_ext.sinks import BatchRegressionError, SinkConfigError
from spark_ext.sinks.protocol import (
    DELTA_TWO_PHASE,
    KAFKA_IDEMPOTENT,
    Outcome,
    Protocol,
    TwoPhaseCommitter,
    abort_batch,
    commit_batch,
    validate_sink_id,
)


class RecordingCommitter(TwoPhaseCommitter[str]):
    """An in-memory target: remembers its marker and what each call did."""

    protocol = Protocol("fake", DELTA_TWO_PHASE.steps)
    sink_id = "fake"

    def __init__(self, recorded: int | None = None) -> None:
        self.recorded = recorded
        self.rows: list[str] = []
        self.calls: list[str] = []

    def last_committed_batch(self) -> int | None:
        self.calls.append("read")
        return self.recorded

    def commit_staged(self, batch_id, messages):
        self.calls.append(f"commit {batch_id}")
        self.rows.extend(messages)
        self.recorded = batch_id

    def clean(self, batch_id, messages, committed):
        self.calls.append(f"clean {batch_id} committed={committed}")

    def recover(self) -> None:
        self.calls.append("recover")


def test_a_new_batch_is_committed_once_then_cleaned():
    target = RecordingCommitter(recorded=3)
    assert commit_batch(target, 4, ["a", "b"]) is Outcome.COMMITTED
    assert target.calls == ["read", "commit 4", "clean 4 committed=True"]
    assert target.rows == ["a", "b"] and target.recorded == 4


def test_replayed_batch_is_skipped_and_its_staging_removed():
    target = RecordingCommitter(recorded=4)
    assert commit_batch(target, 4, ["a"]) is Outcome.SKIPPED_REPLAY
    assert target.calls == ["read", "clean 4 committed=False"]
    assert target.rows == []


def test_batch_below_the_recorded_one_is_a_typed_error_and_writes_nothing():
    """X1: Spark replays only the recorded batch; a lower id (checkpoint reset, a second query,
    a zombie driver) used to be skipped silently, losing the batch."""
    target = RecordingCommitter(recorded=7)
    with pytest.raises(BatchRegressionError) as err:
        commit_batch(target, 4, ["a"])
    assert (err.value.sink_id, err.value.batch_id, err.value.recorded) == ("fake", 4, 7)
    assert target.calls == ["read"] and target.rows == [] and target.recorded == 7


def test_abort_removes_staging_without_committing():
    target = RecordingCommitter()
    abort_batch(target, 0, ["a"])
    assert target.calls == ["clean 0 committed=False"]


def test_crash_points_are_named_by_step_number_and_name():
    assert DELTA_TWO_PHASE.points() == [
        "delta2pc.1.staged",
        "delta2pc.2.before_commit",
        "delta2pc.3.committed",
        "delta2pc.4.cleaned",
    ]
    assert KAFKA_IDEMPOTENT.point(2) == "kafka_idem.2.partial"


def test_crash_point_kills_only_when_asked(monkeypatch):
    killed = []
    monkeypatch.setattr("spark_ext.crash.kill_job", lambda n, b: killed.append((n, b)))
    monkeypatch.setenv("SPARK_EXT_FAULT", "delta2pc.3.committed@1")
    DELTA_TWO_PHASE.reached(3, 0)
    DELTA_TWO_PHASE.reached(2, 1)
    DELTA_TWO_PHASE.reached(3, 1)
    assert killed == [("delta2pc.3.committed", 1)]


@pytest.mark.parametrize("bad", ["", "has space", "a/b", "-lead", "x" * 101, "évent"])
def test_bad_sink_id_is_a_config_error_naming_the_setting(bad):
    with pytest.raises(SinkConfigError) as err:
        validate_sink_id(bad)
    assert err.value.setting == "sink_id"


def test_schema_shape_ignores_nullability_but_not_types():
    from pyspark.sql.types import LongType, StringType, StructField, StructType

    from connectors.delta.table import schema_shape

    a = StructType([StructField("x", StringType(), True)])
    b = StructType([StructField("x", StringType(), False)])
    c = StructType([StructField("x", LongType(), True)])
    assert schema_shape(a.json()) == schema_shape(b.json())
    assert schema_shape(a.json()) != schema_shape(c.json())


def test_record_ids_name_a_slice_by_its_records_not_its_task_index():
    from connectors.kafka.idempotent import partition_identity
    from connectors.kafka.readback import record_id

    a = [(b"k1", b"v1", None), (b"k2", b"v2", None)]
    b = [(b"k3", b"v3", None)]
    # The same slice gets the same name wherever (and in whichever task) it is written: a
    # pinned digest, so a process-seeded hash or a change of the encoding fails here.
    assert partition_identity(a) == "0c840fc31d8e089a"
    assert partition_identity(a) != partition_identity(b)
    assert partition_identity([(None, b"v", None)]) != partition_identity([(b"", b"v", None)])
    assert record_id("s", 3, partition_identity(b), 0) == f"s/3/{partition_identity(b)}/0"
