"""The exact catalog on a real Delta table (written with delta-rs here, no Spark)."""

from __future__ import annotations

import pyarrow as pa
from deltalake import write_deltalake

from spark_ext.dedup import DeltaCatalog


def write_rows(path, rows):
    write_deltalake(
        str(path),
        pa.table(
            {
                "generation": pa.array([r[0] for r in rows], pa.int64()),
                "bucket": pa.array([r[1] for r in rows], pa.int32()),
                "record_id": [r[2] for r in rows],
                "coords": [r[3] for r in rows],
                "batch_id": pa.array([0] * len(rows), pa.int64()),
            }
        ),
        mode="append",
        partition_by=["generation", "bucket"],
    )


def test_lookup_reads_only_the_bucket_and_kept_generations(tmp_path):
    catalog = DeltaCatalog(str(tmp_path / "catalog"))
    assert catalog.lookup(0, ["a"], 0) == {}  # no table yet: nothing seen
    write_rows(
        tmp_path / "catalog", [(1, 0, "a", "t/0/1"), (1, 1, "b", "t/1/1"), (2, 0, "c", "t/0/9")]
    )
    assert catalog.lookup(0, ["a", "b", "c", "zz"], 0) == {"a": "t/0/1", "c": "t/0/9"}
    assert catalog.lookup(0, ["a", "c"], 2) == {"c": "t/0/9"}


def test_purge_bounds_the_catalog_to_kept_generations(tmp_path):
    catalog = DeltaCatalog(str(tmp_path / "catalog"))
    write_rows(tmp_path / "catalog", [(1, 0, "a", "x"), (2, 0, "b", "y"), (3, 0, "c", "z")])
    catalog.purge(3)
    assert catalog.lookup(0, ["a", "b", "c"], 0) == {"c": "z"}
