"""A quiet dedup bucket keeps the filters a re-run of its next batch starts from (issue #24, N2).

``DeltaDedupSink``'s task of bucket ``b`` in batch ``N`` loads ``b``'s newest filter version below
``N`` and saves version ``N``. Saving used to delete every version ``<= N - 3``: a bucket with no
rows in batches ``N-1 .. N-3`` lost the version its batch ``N`` started from, so a retried task
or a replay of ``N`` started from empty filters, called a copy certainly new without asking the
catalog, and wrote it again.
"""

from __future__ import annotations

import datetime as dt
import json

import pytest

from jobs.dedup_delta import DedupPaths
from spark_ext.dedup.state import BloomStateStore, BucketStateStore
from spark_ext.jobrun import run_job

BUCKETS = 4  # jobs.dedup_delta's DedupConfig


def test_saving_after_quiet_batches_keeps_the_version_a_rerun_starts_from(tmp_path):
    store = BucketStateStore(tmp_path)
    store.save(0, 1, b"after batch 1")
    store.save(0, 5, b"after batch 5")  # bucket 0 had no rows in batches 2..4
    assert store.load_before(0, 5) == (1, b"after batch 1")  # a retry or replay of batch 5
    store.save(0, 6, b"after batch 6")
    store.save(0, 9, b"after batch 9")
    assert store.load_before(0, 9) == (6, b"after batch 6")
    assert store.bucket(0).versions() == [6, 9]  # older ones are still pruned


def test_the_one_file_store_keeps_the_base_of_its_newest_version_too(tmp_path):
    store = BloomStateStore(tmp_path, keep=2)
    store.save(3, {0: b"3"})
    store.save(10, {0: b"10"})
    assert store.load_before(10) == (3, {0: b"3"})
    store.save(11, {0: b"11"})
    assert store.versions() == [10, 11]


def _bucket_of(spark, ids: list[str]) -> dict[str, int]:
    from pyspark.sql import functions as F

    rows = spark.createDataFrame([(i,) for i in ids], "id string").select(
        "id", F.pmod(F.xxhash64("id"), F.lit(BUCKETS)).alias("b")
    )
    return {r["id"]: r["b"] for r in rows.collect()}


@pytest.mark.crash
def test_a_retried_task_of_a_bucket_quiet_for_three_batches_drops_the_copy(
    spark, kafka_bootstrap, new_topic, tmp_path
):
    """Batch 0 holds ``q`` (bucket Q); batches 1-3 have no row of bucket Q; batch 4 holds a copy
    of ``q``, and every task of batch 4 fails on attempt 0 after it saved its filters (profile
    ``faults`` retries it). Before the fix the retry of bucket Q found no filters and wrote
    ``q`` twice."""
    from connectors import kafka

    candidates = [f"id{i:03d}" for i in range(200)]
    bucket = _bucket_of(spark, candidates)
    q = candidates[0]
    others = [i for i in candidates[1:] if bucket[i] != bucket[q]]
    per_batch = 5
    batches = [[q, *others[:4]]]
    batches += [others[4 + 5 * k : 9 + 5 * k] for k in range(3)]
    batches += [[q, *others[19:23]]]
    t0 = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
    records = [
        {
            "sensor": "s",
            "reading_id": rid,
            "event_time": (t0 + dt.timedelta(seconds=n)).isoformat(),
            "temp_c": float(n),
        }
        for n, rid in enumerate(r for b in batches for r in b)
    ]
    topic = new_topic("dedup-quiet", partitions=1)
    kafka.produce(kafka_bootstrap, topic, ((b"s", json.dumps(r).encode(), 0) for r in records))

    paths = DedupPaths(tmp_path / "quiet")
    point = "dedup_delta.1.staged"
    run = run_job(
        "jobs.dedup_delta",
        [
            "--profile",
            "faults",
            "--bootstrap",
            kafka_bootstrap,
            "--topic",
            topic,
            "--out",
            str(paths.root),
            "--max-offsets-per-trigger",
            str(per_batch),
        ],
        fault=f"{point}@4:raise",
        timeout_s=600,
    )
    assert run.ok, run.output_tail
    assert any(f["point"] == point and f["batch"] == 4 for f in run.faults), run.faults

    out = spark.read.format("delta").load(str(paths.unique))
    ids = [r["reading_id"] for r in out.select("reading_id").collect()]
    assert sorted(ids) == sorted(set(ids)) and len(ids) == len({r for b in batches for r in b})
