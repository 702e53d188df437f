"""The one dedup catalog on a real Delta table (written with delta-rs here, no Spark)."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from connectors.delta.dedup_staging import catalog_file_tag, commit_catalog, stage_catalog
from spark_ext.dedup import CATALOG_SCHEMA, DedupCatalog
from spark_ext.dedup.catalog import catalog_app_id
from spark_ext.sinks.errors import BatchRegressionError


def rows(entries, batch_id=0):
    """Catalog rows from ``(generation, bucket, hash, record_id, coords)`` tuples."""
    return pa.table(
        {
            "generation": pa.array([e[0] for e in entries], pa.int64()),
            "bucket": pa.array([e[1] for e in entries], pa.int32()),
            "hash": pa.array([e[2] for e in entries], pa.int64()),
            "record_id": pa.array([e[3] for e in entries], pa.string()),
            "coords": pa.array([e[4] for e in entries], pa.string()),
            "batch_id": pa.array([batch_id] * len(entries), pa.int64()),
        },
        schema=CATALOG_SCHEMA,
    )


def append(catalog: DedupCatalog, table: pa.Table, batch_id: int) -> bool:
    """Stage ``table`` and commit it as batch ``batch_id`` of sink ``s`` (the dedup sink's
    steps 1 and 2); ``False`` for a replay."""
    files = stage_catalog(catalog.path, catalog_file_tag("s"), table, batch_id, 0, 0)
    return commit_catalog(catalog.path, "s", batch_id, files)


def test_lookup_by_id_reads_only_the_bucket_and_kept_generations(tmp_path):
    catalog = DedupCatalog(str(tmp_path / "catalog"))
    assert catalog.lookup_ids(0, ["a"], 0) == {}  # no table yet: nothing seen
    append(
        catalog,
        rows([(1, 0, 11, "a", "t/0/1"), (1, 1, 12, "b", "t/1/1"), (2, 0, 13, "c", "t/0/9")]),
        0,
    )
    assert catalog.lookup_ids(0, ["a", "b", "c", "zz"], 0) == {"a": "t/0/1", "c": "t/0/9"}
    assert catalog.lookup_ids(0, ["a", "c"], 2) == {"c": "t/0/9"}


def test_lookup_by_hash_sees_only_earlier_batches(tmp_path):
    catalog = DedupCatalog(str(tmp_path / "catalog"))
    append(catalog, rows([(0, 0, 11, "a", "t/0/1")], batch_id=0), 0)
    append(catalog, rows([(0, 1, 12, "b", "t/0/2")], batch_id=1), 1)
    found = catalog.lookup_hashes(np.array([11, 12, 99], dtype=np.int64), before_batch=1)
    assert found.column("record_id").to_pylist() == ["a"]
    assert catalog.lookup_hashes(np.array([11, 12], dtype=np.int64), 2).num_rows == 2


def test_catalog_commit_is_once_per_batch_and_refuses_a_lower_batch(tmp_path):
    catalog = DedupCatalog(str(tmp_path / "catalog"))
    assert append(catalog, rows([(0, 0, 11, "a", "x")]), 3)
    assert not append(catalog, rows([(0, 0, 11, "a", "x")]), 3)  # replay
    with pytest.raises(BatchRegressionError):
        append(catalog, rows([(0, 0, 12, "b", "y")]), 2)
    assert catalog.lookup_ids(0, ["a", "b"], 0) == {"a": "x"}
    assert catalog.last_batch(catalog_app_id("s")) == 3


def test_purge_bounds_the_catalog_to_kept_generations(tmp_path):
    catalog = DedupCatalog(str(tmp_path / "catalog"))
    append(catalog, rows([(1, 0, 1, "a", "x"), (2, 0, 2, "b", "y"), (3, 0, 3, "c", "z")]), 0)
    catalog.purge(3)
    assert catalog.lookup_ids(0, ["a", "b", "c"], 0) == {"c": "z"}


def test_a_catalog_deleted_and_made_again_at_the_same_path_is_read_afresh(tmp_path):
    """The open table of a path is kept between lookups (a reused Python worker); a new table
    at that path (a benchmark repeat, a test) must not be read as more commits of the old."""
    import shutil

    path = str(tmp_path / "catalog")
    first = DedupCatalog(path)
    for b in range(3):
        append(first, rows([(0, 0, 10 + b, f"old{b}", "t/0/1")], b), b)
    assert first.lookup_hashes(np.array([10]), 9).column("record_id").to_pylist() == ["old0"]

    shutil.rmtree(path)
    again = DedupCatalog(path)
    for b in range(5):
        append(again, rows([(0, 0, 20 + b, f"new{b}", "t/0/1")], b), b)
    found = DedupCatalog(path).lookup_hashes(np.array([10, 20, 24]), 9)
    assert sorted(found.column("record_id").to_pylist()) == ["new0", "new4"]
    assert DedupCatalog(path).last_batch(catalog_app_id("s")) == 4
