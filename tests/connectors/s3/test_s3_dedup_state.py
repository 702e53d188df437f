"""The dedup filters' bucket state in the local S3 store: the same versions, reads, pruning and
errors as in a local folder, and the store's settings carried into Spark tasks."""

from __future__ import annotations

import pickle
from pathlib import Path

import pytest

from spark_ext import storage
from spark_ext.dedup.errors import DedupStateError
from spark_ext.dedup.state import BucketStateStore
from spark_ext.storage import Location, StorageSettings

pytestmark = pytest.mark.integration


def _history(store: BucketStateStore) -> list[object]:
    """Save two buckets over five batches; what the store holds and reads after each."""
    seen: list[object] = [store.load_before(0, 0)]
    for batch in range(5):
        store.save(0, batch, f"zero-{batch}".encode())
        if batch % 2 == 0:  # bucket 3 is quiet on odd batches
            store.save(3, batch, f"three-{batch}".encode())
        seen += [store.bucket(0).versions(), store.bucket(3).versions()]
    seen += [store.buckets(), store.load_before(0, 5), store.load_before(3, 5)]
    return seen


def test_bucket_state_on_s3_behaves_as_in_a_local_folder(
    tmp_path: Path, s3_root: Location, s3_settings: StorageSettings
) -> None:
    on_s3 = BucketStateStore(storage.spark_uri(s3_root.join("filters")), 2, s3_settings)
    assert _history(on_s3) == _history(BucketStateStore(tmp_path, 2))
    assert on_s3.load_before(3, 5) == (4, b"three-4")

    with pytest.raises(DedupStateError, match=f"s3://{s3_root.bucket}/.*reset"):
        on_s3.load_before(0, 2)  # versions ahead of the batch: the checkpoint was reset
    newest = on_s3.bucket(0)._file(4)
    storage.write_bytes(newest, storage.read_bytes(newest, s3_settings)[:-1] + b"!", s3_settings)
    with pytest.raises(DedupStateError, match="checksum"):
        on_s3.load_before(0, 5)


def test_tasks_reach_the_s3_state_with_the_settings_in_their_closure(
    spark, s3_root: Location, s3_settings: StorageSettings
) -> None:
    store = BucketStateStore(storage.spark_uri(s3_root.join("filters")), settings=s3_settings)
    assert s3_settings.secret_access_key not in repr(store.settings)
    assert pickle.loads(pickle.dumps(store)).settings == s3_settings

    def save_and_read(buckets):  # runs in an executor's Python worker, which has no session
        out = []
        for bucket in buckets:
            store.save(bucket, 7, f"b{bucket}".encode())
            out.append(store.load_before(bucket, 8))
        return out

    found = spark.sparkContext.parallelize([1, 2, 5], 3).mapPartitions(save_and_read).collect()
    assert found == [(7, b"b1"), (7, b"b2"), (7, b"b5")]
    assert store.buckets() == [1, 2, 5]
