"""Writers sharing a Delta table on the local S3 store (docs/design.md, "Object storage",
writers sharing a table).

delta-rs 1.x commits a version with a conditional put (``If-None-Match: *``), so on a store whose
conditional put is atomic (AWS S3 documents it) the two-phase sink's commits and a second
delta-rs writer's lose nothing: every commit reported done is one version, every row is read
back once by Spark and by delta-rs. The local store is not such a store: S3Proxy 2.6.0 ignores
``If-None-Match`` on a PUT (measured: a second conditional PUT of a key answered 200 and
replaced it), and 4 delta-rs writers racing 25 appends each on it kept 58 of 100 commits
reported done. So the racing writers reach it through a proxy that makes its conditional
creates atomic (``StoreFaultProxy(..., conditional_writes=...)``: a conditional create checks
and writes its object alone, 412 if it exists), in a process of its own. Spark's Delta 4.4
commits on ``s3a://`` with ``S3SingleDriverLogStore`` (a lock inside its JVM, then an
existence check and an unconditional PUT), which cannot be made safe beside a delta-rs writer
on any store: each kind of sink refuses a table the other kind wrote (``MixedDeltaWritersError``).
"""

from __future__ import annotations

import dataclasses
import logging
import multiprocessing
import threading
from collections.abc import Iterator

import pyarrow as pa
import pytest
from deltalake import write_deltalake

from connectors.delta.table import ensure_table
from connectors.delta.two_phase import DeltaCommitter
from spark_ext import storage
from spark_ext.recovery.store_proxy import StoreFaultProxy
from spark_ext.sinks.delta_txn import DeltaTxnAppender
from spark_ext.sinks.errors import MixedDeltaWritersError
from spark_ext.sinks.owner import SinkOwner
from spark_ext.sinks.protocol import Outcome
from spark_ext.storage import Location, StorageSettings
from tests.connectors.delta.test_delta_committed_files import SCHEMA, SINK, spark_commit, stage
from tests.connectors.delta.test_delta_writers_race import RacingAppends
from tests.connectors.s3.test_s3_delta_sinks import delta_table

pytestmark = pytest.mark.integration


def serve_atomic_proxy(settings: StorageSettings, endpoint: multiprocessing.Queue) -> None:
    """Run a proxy whose conditional creates are atomic until killed; put its endpoint."""
    endpoint.put(StoreFaultProxy(settings.endpoint, 512, conditional_writes=settings).start())
    threading.Event().wait()


@pytest.fixture
def atomic_settings(s3_settings: StorageSettings) -> Iterator[StorageSettings]:
    """The local store reached through a proxy whose conditional PUTs are atomic, in a process
    of its own: delta-rs's ``DeltaTable.history()`` holds this process's GIL while it waits."""
    spawn = multiprocessing.get_context("spawn")
    queue: multiprocessing.Queue = spawn.Queue()
    proxy = spawn.Process(target=serve_atomic_proxy, args=(s3_settings, queue), daemon=True)
    proxy.start()
    try:
        yield dataclasses.replace(s3_settings, endpoint=queue.get(timeout=60))
    finally:
        proxy.kill()
        proxy.join()


def race(
    spark, table: Location, settings: StorageSettings, batches: int, others: int, caplog
) -> None:
    """The two-phase sink commits ``batches`` batches while ``others`` delta-rs writers append
    ``batches`` rows each, one commit per row; then every commit and row is checked."""
    ensure_table(str(table), SCHEMA, settings)
    uri, options = storage.delta_storage(table, settings)
    committer = DeltaCommitter(str(table), SINK, max_conflicts=50, settings=settings)
    committer.recover(fence=True)
    appends = RacingAppends(
        uri, others, lambda rid, i: pa.table({"id": [rid], "n": pa.array([i], pa.int64())}), options
    )
    start = threading.Barrier(1 + others)
    threads = appends.start(lambda i: i < batches, start)
    ours: list[str] = []
    with caplog.at_level(logging.WARNING, logger="connectors.delta.commit"):
        start.wait()
        for b in range(batches):
            ids = [f"s{b}-{i}" for i in range(4)]
            outcome = spark_commit(committer, b, stage(str(table), b, ids, settings=settings))
            assert outcome is Outcome.COMMITTED
            ours += ids
    for t in threads:
        t.join()
    assert not appends.errors

    dt = delta_table(table, settings)
    theirs = [r for w in appends.committed for r in w]
    # one version per commit reported done (creation, the sink's fence, its batches, theirs)
    assert dt.version() == 1 + 1 + batches + len(theirs) - 1
    assert [h["version"] for h in dt.history()] == list(range(dt.version(), -1, -1))
    assert dt.transaction_version(SINK) == batches - 1
    committed = sorted(
        int(h["spark_ext.batch_id"]) for h in dt.history() if "spark_ext.batch_id" in h
    )
    assert committed == list(range(batches))
    expected = sorted(ours + theirs)
    assert sorted(dt.to_pyarrow_table()["id"].to_pylist()) == expected
    rows = spark.read.format("delta").load(storage.spark_uri(table)).collect()
    assert sorted(r.id for r in rows) == expected
    lost = sum("lost a race" in r.getMessage() for r in caplog.records)
    print(
        f"{batches} batches vs {others}x{batches} appends: the sink lost {lost} races, "
        f"{len(appends.refused)} appends refused by delta-rs"
    )


def test_idempotent_mode_refuses_a_table_the_two_phase_sink_and_delta_rs_wrote_on_s3(
    s3_spark, s3_root: Location, s3_settings, caplog
) -> None:
    """The two-phase sink's batches and a delta-rs writer's appends, taking turns, each one
    version; then the idempotent mode (Spark's Delta writer) refuses the table at start."""
    table = s3_root.join("t")
    race(s3_spark, table, s3_settings, batches=3, others=0, caplog=caplog)
    uri, options = storage.delta_storage(table, s3_settings)
    write_deltalake(uri, pa.table({"id": ["w"], "n": pa.array([0], pa.int64())}),
                    mode="append", storage_options=options)  # fmt: skip

    spark_writer = DeltaTxnAppender(str(table), "idem", settings=s3_settings)
    version = delta_table(table, s3_settings).version()
    with pytest.raises(MixedDeltaWritersError, match="a delta-rs writer"):
        spark_writer.claim(SinkOwner("6c1f0a52-5d0e-4a53-9d55-0d4f3b7e2a11"), pa.schema([]))
    assert delta_table(table, s3_settings).version() == version  # nothing written


@pytest.mark.heavy
def test_delta_rs_writers_racing_on_s3_with_atomic_conditional_puts_keep_every_commit(
    s3_root: Location, atomic_settings: StorageSettings
) -> None:
    """Three writers, eight appends each at once: every append reported done is one version
    and one row (directly on the local store, 4 x 25 kept 58 of 100)."""
    table = s3_root.join("r")
    ensure_table(str(table), SCHEMA, atomic_settings)
    uri, options = storage.delta_storage(table, atomic_settings)
    appends = RacingAppends(
        uri, 3, lambda rid, i: pa.table({"id": [rid], "n": pa.array([i], pa.int64())}), options
    )
    for t in appends.start(lambda i: i < 8, threading.Barrier(3)):
        t.join()
    assert not appends.errors
    done = sorted(r for w in appends.committed for r in w)
    dt = delta_table(table, atomic_settings)
    assert dt.version() == len(done)  # version 0 is the creation
    assert sorted(dt.to_pyarrow_table()["id"].to_pylist()) == done
    print(f"3 x 8 racing appends: {len(done)} done, {len(appends.refused)} refused by delta-rs")


def test_two_phase_sink_racing_delta_rs_writers_on_s3_loses_no_commit(
    s3_spark, s3_root: Location, atomic_settings, caplog
) -> None:
    """Three competitors at once, through the atomic proxy (see the module docstring)."""
    race(s3_spark, s3_root.join("t"), atomic_settings, batches=6, others=3, caplog=caplog)
