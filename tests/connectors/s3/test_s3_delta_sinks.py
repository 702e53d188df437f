"""The two-phase Delta sink with its table on the local S3 store (docs/design.md, "Object
storage"): a stream of three batches read back by Spark (``s3a://``) and delta-rs, every row
once; an abort after a durable commit and the skipped replay delete no committed file and leave
no staged one; the dedup Delta sink's output on the store."""

from __future__ import annotations

import dataclasses
import posixpath

import pytest
from deltalake import DeltaTable

from connectors.delta.table import ensure_table
from connectors.delta.two_phase import DeltaCommitter
from connectors.sinks import Trigger, exactly_once_to_delta
from jobs.exactly_once_delta import events_stream
from spark_ext import storage
from spark_ext.crash import FAULT_ENV
from spark_ext.dedup.catalog import DedupCatalog, catalog_app_id
from spark_ext.sinks.errors import MixedDeltaWritersError
from spark_ext.sinks.protocol import DELTA_TWO_PHASE, Outcome
from spark_ext.storage import Location, StorageSettings
from tests.conftest import await_done
from tests.connectors.conftest import EVENTS, MAX_OFFSETS
from tests.connectors.delta.test_delta_committed_files import (
    BATCH0,
    BATCH1,
    SCHEMA,
    SINK,
    spark_commit,
    stage,
)

pytestmark = pytest.mark.integration


def delta_table(table: Location, settings: StorageSettings) -> DeltaTable:
    uri, options = storage.delta_storage(table, settings)
    return DeltaTable(uri, storage_options=options)


def assert_staged_files_are_the_referenced(
    table: Location, settings: StorageSettings, sink: str
) -> None:
    """Every file the sink staged in the table folder is one the table references, and back."""
    on_store = sorted(
        n for n, _ in DeltaCommitter(str(table), sink, settings=settings).staged_files()
    )
    referenced = sorted(posixpath.basename(u) for u in delta_table(table, settings).file_uris())
    assert on_store == referenced


def test_two_phase_sink_streams_to_a_table_on_s3(
    s3_spark, kafka_bootstrap, events_topic, s3_root: Location, s3_settings, tmp_path
) -> None:
    table = s3_root.join("events")
    df = events_stream(s3_spark, kafka_bootstrap, events_topic, MAX_OFFSETS)
    q = exactly_once_to_delta(
        df,
        storage.spark_uri(table),
        sink_id="events",
        checkpoint=str(tmp_path / "chk"),
        trigger=Trigger(available_now=True),
    )  # no storage=: the session's settings (the profile's [storage]) reach the tasks
    await_done(q, 300)
    assert q.exception() is None

    got = s3_spark.read.format("delta").load(storage.spark_uri(table))
    assert got.count() == EVENTS
    assert got.select("topic", "partition", "offset").distinct().count() == EVENTS
    dt = delta_table(table, s3_settings)
    rows = dt.to_pyarrow_table(columns=["topic", "partition", "offset"]).to_pylist()
    assert len(rows) == len({tuple(r.values()) for r in rows}) == EVENTS
    batches = EVENTS // MAX_OFFSETS
    assert dt.transaction_version("events") == batches - 1
    committed = [int(h["spark_ext.batch_id"]) for h in dt.history() if "spark_ext.batch_id" in h]
    assert sorted(committed) == list(range(batches))  # one commit per batch
    assert_staged_files_are_the_referenced(table, s3_settings, "events")


def assert_reads_back(spark, table: Location, settings: StorageSettings, ids: list[str]) -> None:
    dt = delta_table(table, settings)
    gone = [u for u in dt.file_uris() if not storage.exists(u, settings)]
    assert not gone, f"the table references deleted files: {gone}"
    assert sorted(dt.to_pyarrow_table()["id"].to_pylist()) == sorted(ids)
    rows = spark.read.format("delta").load(storage.spark_uri(table)).collect()
    assert sorted(r.id for r in rows) == sorted(ids)


def test_abort_and_replay_on_s3_delete_only_unreferenced_staged_files(
    s3_spark, s3_root: Location, s3_settings, monkeypatch
) -> None:
    table = s3_root.join("t")
    ensure_table(str(table), SCHEMA, s3_settings)
    committer = DeltaCommitter(str(table), SINK, settings=s3_settings)
    committer.recover(fence=True)
    assert (
        spark_commit(committer, 0, stage(str(table), 0, BATCH0, settings=s3_settings))
        is Outcome.COMMITTED
    )

    # The commit of batch 1 is durable, then step 3 raises: abort keeps every referenced file.
    monkeypatch.setenv(FAULT_ENV, f"{DELTA_TWO_PHASE.point(3)}@1:raise")
    with pytest.raises(Exception, match="injected fault"):
        spark_commit(committer, 1, stage(str(table), 1, BATCH1, settings=s3_settings))
    monkeypatch.delenv(FAULT_ENV)
    assert_reads_back(s3_spark, table, s3_settings, BATCH0 + BATCH1)

    # Spark replays batch 1: skipped, and the replay's staged files are removed.
    replay = stage(str(table), 1, BATCH1, settings=s3_settings)
    assert spark_commit(committer, 1, replay) is Outcome.SKIPPED_REPLAY
    names = storage.list_prefix(table, s3_settings)
    assert not any(m.path in names for m in replay)
    assert_reads_back(s3_spark, table, s3_settings, BATCH0 + BATCH1)
    assert_staged_files_are_the_referenced(table, s3_settings, SINK)

    # A batch staged but never committed (its driver died) is removed by the next start.
    orphan = stage(str(table), 2, ["c0", "c1"], settings=s3_settings)
    DeltaCommitter(str(table), SINK, settings=s3_settings).recover(fence=True)
    names = storage.list_prefix(table, s3_settings)
    assert not any(m.path in names for m in orphan)
    assert_reads_back(s3_spark, table, s3_settings, BATCH0 + BATCH1)
    assert_staged_files_are_the_referenced(table, s3_settings, SINK)


def test_dedup_sink_writes_its_output_to_s3_once(
    s3_spark, s3_root: Location, s3_settings, tmp_path
) -> None:
    """The dedup sink's output, catalog and bucket filters on the store, its settings given
    once in the ``DedupConfig`` (the tasks read the catalog with them); a batch and its replay,
    each reading kept once."""
    from connectors.delta.dedup_sink import DeltaDedupSink
    from tests.connectors.delta.test_dedup_delta_sink_batch_order import (
        OWNER,
        dedup_config,
        readings,
    )

    out, catalog = s3_root.join("unique"), s3_root.join("catalog")
    config = dataclasses.replace(
        dedup_config(tmp_path), catalog_path=storage.spark_uri(catalog), storage=s3_settings
    )
    sink = DeltaDedupSink(config, str(out), "orders", str(s3_root.join("state")), owner=OWNER)
    batches = [readings(s3_spark, b) for b in range(3)]
    for batch_id, batch in enumerate(batches):
        sink(batch, batch_id)
    sink(batches[2], 2)  # a replay: skipped

    expected = sorted({r.reading_id for b in batches for r in b.collect()})
    rows = s3_spark.read.format("delta").load(storage.spark_uri(out)).collect()
    assert sorted(r.reading_id for r in rows) == expected
    dt = delta_table(out, s3_settings)
    assert sorted(dt.to_pyarrow_table()["reading_id"].to_pylist()) == expected
    assert dt.transaction_version("orders") == 2
    assert_staged_files_are_the_referenced(out, s3_settings, "orders")
    filters = storage.list_prefix(s3_root.join("state", "filters"), s3_settings)
    assert filters, "the buckets' filters are saved on the store"
    kept = delta_table(catalog, s3_settings).to_pyarrow_table(columns=["record_id"])
    assert sorted(kept["record_id"].to_pylist()) == expected  # every kept id, once
    assert DedupCatalog.of(config).last_batch(catalog_app_id("orders")) == 2
    assert not [n for n in storage.list_prefix(catalog, s3_settings) if n.startswith("/")]


def test_idempotent_mode_writes_a_table_on_s3_once_and_refuses_a_delta_rs_sink(
    s3_spark, s3_root: Location, s3_settings
) -> None:
    """The idempotent mode (Spark's Delta writer, ``s3a://``) on the store: two batches and a
    replay that writes nothing, read back by Spark and delta-rs; the owner's checkpoint record
    on the store; a two-phase sink (delta-rs) then refuses the table Spark's Delta wrote
    (docs/design.md, "Object storage", writers sharing a table)."""
    from connectors.delta.idempotent import DeltaIdempotentWriter
    from spark_ext.sinks.owner import owner_of_checkpoint

    table = s3_root.join("idem")
    owner = owner_of_checkpoint(s3_root.join("chk"), s3_settings)  # a new checkpoint on S3
    assert owner_of_checkpoint(storage.spark_uri(s3_root.join("chk")), s3_settings) == owner
    writer = DeltaIdempotentWriter(
        storage.spark_uri(table), "idem", owner=owner, settings=s3_settings
    )
    batches = [
        s3_spark.createDataFrame([(f"b{b}-{i}", i) for i in range(3)], SCHEMA) for b in range(2)
    ]
    for batch_id, batch in enumerate(batches):
        writer(batch, batch_id)
    before = delta_table(table, s3_settings).version()
    writer(batches[1], 1)  # a replay: skipped, nothing written
    dt = delta_table(table, s3_settings)
    assert dt.version() == before
    assert dt.transaction_version("idem") == 1
    expected = sorted(f"b{b}-{i}" for b in range(2) for i in range(3))
    assert sorted(dt.to_pyarrow_table()["id"].to_pylist()) == expected
    rows = s3_spark.read.format("delta").load(storage.spark_uri(table)).collect()
    assert sorted(r.id for r in rows) == expected

    committer = DeltaCommitter(str(table), "other", settings=s3_settings)
    with pytest.raises(MixedDeltaWritersError, match="Spark's Delta writer"):
        committer.recover(fence=True)
    assert delta_table(table, s3_settings).version() == before  # nothing written


def test_a_table_in_a_missing_bucket_is_refused_at_start_naming_it(s3_settings) -> None:
    with pytest.raises(storage.BucketNotFound, match="no-such-bucket"):
        ensure_table("s3a://no-such-bucket/t", SCHEMA, s3_settings)
