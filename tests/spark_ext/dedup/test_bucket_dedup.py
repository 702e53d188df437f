"""The dedup decision of one bucket as pure logic (no Spark): Bloom first, catalog on "maybe"."""

from __future__ import annotations

import numpy as np
import pytest

from spark_ext.dedup import BucketDedup, DedupConfig, DedupMetrics
from spark_ext.errors import ConfigError
from spark_ext.hashing import shard_of


class FakeCatalog:
    """An in-memory catalog recording which ids it was asked about."""

    def __init__(self, entries=None):
        self.entries = dict(entries or {})
        self.asked: list[str] = []

    def lookup(self, bucket, ids, min_generation):
        self.asked.extend(ids)
        return {i: self.entries[i] for i in ids if i in self.entries}

    def commit(self, ids, coords, keep):
        for i, c, k in zip(ids, coords, keep, strict=True):
            if k:
                self.entries.setdefault(i, c)


def decide(dedup, catalog, ids, coords=None, et=None):
    ids = np.array(ids, dtype=object)
    coords = np.array(coords or [f"c-{i}" for i in ids], dtype=object)
    et = np.array(et or [0] * len(ids), dtype=np.int64)
    keep, metrics = dedup.decide(ids, et, coords, catalog.lookup)
    catalog.commit(ids, coords, keep)
    return keep.tolist(), metrics


def config(**kw):
    return DedupConfig(catalog_path="unused", capacity=10_000, fp_rate=0.01, buckets=1, **kw)


def test_new_ids_need_no_catalog_lookup():
    catalog = FakeCatalog()
    keep, m = decide(BucketDedup(config(), 0), catalog, [f"r{i}" for i in range(500)])
    assert all(keep)
    assert m.bloom_negative + m.false_positives == 500
    assert len(catalog.asked) == m.catalog_lookups == m.false_positives < 15


def test_copy_in_the_same_batch_is_dropped_without_the_catalog():
    catalog = FakeCatalog()
    keep, m = decide(BucketDedup(config(), 0), catalog, ["a", "b", "a"], ["p0/1", "p0/2", "p1/7"])
    assert keep == [True, True, False]
    assert m.batch_duplicates == 1
    assert catalog.asked == []


def test_copy_in_a_later_batch_is_found_in_the_catalog():
    dedup, catalog = BucketDedup(config(), 0), FakeCatalog()
    decide(dedup, catalog, ["a", "b"], ["p0/1", "p0/2"])
    keep, m = decide(dedup, catalog, ["a", "c"], ["p1/9", "p1/10"])
    assert keep == [False, True]
    assert m.catalog_duplicates == 1
    assert "a" in catalog.asked and "c" not in catalog.asked


def test_replayed_batch_finding_its_own_catalog_rows_keeps_them():
    """A crash after the catalog append: the replay sees its own ids with its own coordinates."""
    dedup, catalog = BucketDedup(config(), 0), FakeCatalog()
    decide(dedup, catalog, ["a"], ["p0/1"])
    state = dedup.dump()
    first_keep, _ = decide(dedup, catalog, ["a", "b", "b"], ["p0/5", "p0/6", "p0/8"])
    replay = BucketDedup(config(), 0)
    replay.load(state)
    keep, m = decide(replay, catalog, ["a", "b", "b"], ["p0/5", "p0/6", "p0/8"])
    assert keep == first_keep == [False, True, False]
    assert m.catalog_duplicates == 1


def test_false_positive_is_kept_and_counted():
    dedup = BucketDedup(DedupConfig(catalog_path="x", capacity=8, fp_rate=0.5, buckets=1), 0)
    catalog = FakeCatalog()
    ids = [f"r{i}" for i in range(200)]
    keep, _ = decide(dedup, catalog, ids[:100])
    keep2, m2 = decide(dedup, catalog, ids[100:])
    assert all(keep) and all(keep2)
    assert m2.false_positives > 0
    assert 0 < m2.observed_fp_rate <= 1
    assert m2.lookups_avoided < 1


def test_metrics_add_up():
    a = DedupMetrics(rows=10, bloom_negative=8, false_positives=1)
    b = DedupMetrics(rows=5, bloom_negative=5)
    total = a + b
    assert total.rows == 15
    assert total.lookups_avoided == pytest.approx(13 / 15)
    assert total.observed_fp_rate == pytest.approx(1 / 14)
    assert DedupMetrics.from_json(total.to_json()) == total


def test_buckets_are_stable_and_spread():
    ids = [f"id-{i}" for i in range(4000)]
    b = shard_of(ids, 8)
    # Pinned: the same bucket in every process and release (a seeded hash() would move).
    assert b[:6].tolist() == [0, 1, 3, 3, 1, 1]
    assert set(b.tolist()) == set(range(8))
    assert np.bincount(b).min() > 350


def test_config_names_the_bad_setting():
    with pytest.raises(ConfigError, match=r"dedup\.buckets"):
        DedupConfig(catalog_path="x", buckets=0)
    with pytest.raises(ConfigError, match=r"bloom\.fp_rate"):
        DedupConfig(catalog_path="x", fp_rate=2.0)
