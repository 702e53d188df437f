"""DeltaDedupSink's decision (run per bucket in its tasks) and its filter state, as pure logic
(no Spark)."""

from __future__ import annotations

import itertools

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from spark_ext.dedup import (
    CATALOG_SCHEMA,
    BloomStateStore,
    BucketStateStore,
    DedupConfig,
    DedupStateError,
    decide_batch,
)
from spark_ext.errors import ConfigError
from spark_ext.hashing import stable_hash64

HOUR_US = 3_600_000_000


def config(**kw):
    base = dict(
        catalog_path="unused",
        capacity=10_000,
        fp_rate=0.01,
        buckets=4,
        coordinate_columns=("partition", "offset"),
    )
    return DedupConfig(**{**base, **kw})


def keys(ids, partitions=None, offsets=None, et_us=None):
    n = len(ids)
    return pa.table(
        {
            "_dedup_hash": pa.array(stable_hash64(ids).view(np.int64)),
            "_dedup_id": pa.array(ids, pa.string()),
            "_dedup_et_us": pa.array(et_us if et_us is not None else [0] * n, pa.int64()),
            "partition": pa.array(partitions if partitions is not None else [0] * n, pa.int32()),
            "offset": pa.array(offsets if offsets is not None else list(range(n)), pa.int64()),
        }
    )


class Catalog:
    """In memory: what the sink appends per batch, looked up the way DedupCatalog.lookup_hashes is."""

    def __init__(self):
        self.rows: list[tuple[int, int, int, str, int]] = []  # generation, bucket, hash, id, batch
        self.asked = 0

    def lookup(self, hashes, before_batch):
        self.asked += len(hashes)
        wanted = set(hashes.tolist())
        hit = [r for r in self.rows if r[2] in wanted and r[4] < before_batch]
        return pa.table(
            {
                "bucket": pa.array([r[1] for r in hit], pa.int32()),
                "generation": pa.array([r[0] for r in hit], pa.int64()),
                "hash": pa.array([r[2] for r in hit], pa.int64()),
                "record_id": pa.array([r[3] for r in hit], pa.string()),
            }
        )

    def append(self, table, decision, batch_id):
        for i in np.flatnonzero(decision.keep):
            self.rows.append(
                (
                    int(decision.generation[i]),
                    int(decision.bucket[i]),
                    int(table.column("_dedup_hash")[i].as_py()),
                    table.column("_dedup_id")[i].as_py(),
                    batch_id,
                )
            )


def run(batches, cfg=None, catalog=None):
    """Decide ``batches`` (lists of keys tables) in turn; returns kept ids per batch."""
    cfg = cfg or config()
    catalog = catalog or Catalog()
    blooms: dict = {}
    kept, decisions = [], []
    for batch_id, table in enumerate(batches):
        d = decide_batch(table, cfg, blooms, catalog.lookup, batch_id)
        catalog.append(table, d, batch_id)
        kept.append([table.column("_dedup_id")[i].as_py() for i in np.flatnonzero(d.keep)])
        decisions.append(d)
    return kept, decisions, catalog


def test_copies_in_one_batch_keep_the_first_in_event_time_then_coordinates():
    # r1 three times: the copy with the earliest event time wins, ties by (partition, offset).
    table = keys(
        ["r1", "r2", "r1", "r1"],
        partitions=[1, 0, 0, 1],
        offsets=[9, 1, 5, 3],
        et_us=[20, 0, 10, 10],
    )
    [kept], [d], _ = run([table])
    assert kept == ["r2", "r1"]
    assert d.keep.tolist() == [False, True, True, False]  # r1 at (partition 0, offset 5)
    assert d.metrics.batch_duplicates == 2
    assert d.metrics.rows == 4


def test_copies_in_later_batches_are_found_in_the_catalog_and_dropped():
    kept, decisions, _catalog = run(
        [keys(["a", "b", "c"]), keys(["b", "d"], offsets=[10, 11]), keys(["a"], offsets=[20])]
    )
    assert kept == [["a", "b", "c"], ["d"], []]
    assert decisions[1].metrics.catalog_duplicates == 1
    assert decisions[2].metrics.catalog_duplicates == 1
    # Only Bloom "maybe" rows reach the catalog: the new ids of batch 1 were not looked up.
    assert decisions[1].metrics.catalog_lookups == 1
    assert decisions[1].metrics.bloom_negative == 1


def test_a_replayed_batch_ignores_its_own_catalog_rows_and_decides_the_same():
    cfg = config()
    catalog = Catalog()
    first = keys(["a", "b"])
    second = keys(["b", "c", "c"], offsets=[5, 6, 7])
    blooms: dict = {}
    d0 = decide_batch(first, cfg, blooms, catalog.lookup, 0)
    catalog.append(first, d0, 0)
    before = {b: f.to_bytes() for b, f in blooms.items()}
    d1 = decide_batch(second, cfg, blooms, catalog.lookup, 1)
    catalog.append(second, d1, 1)  # the killed attempt got as far as the catalog
    # Replay of batch 1 from the filters saved after batch 0.
    replay_blooms = {b: cfg.new_bloom() for b in before}
    for b, data in before.items():
        replay_blooms[b].load_bytes(data)
    again = decide_batch(second, cfg, replay_blooms, catalog.lookup, 1)
    assert again.keep.tolist() == d1.keep.tolist() == [False, True, False]
    assert {b: f.to_bytes() for b, f in replay_blooms.items()} == {
        b: f.to_bytes() for b, f in blooms.items()
    }


def test_catalog_rows_of_rotated_out_generations_are_ignored():
    cfg = config(rotation_ms=3_600_000, generations=2)
    kept, _, _ = run(
        [
            keys(["x"], et_us=[0]),
            keys(["y"], offsets=[1], et_us=[2 * HOUR_US]),  # generation 2: generation 0 is out
            keys(["x"], offsets=[2], et_us=[2 * HOUR_US]),
        ],
        cfg,
    )
    # The copy of "x" came after its original's generation left the window: treated as new.
    assert kept == [["x"], ["y"], ["x"]]


def test_an_empty_batch_decides_nothing():
    [kept], [d], _ = run([keys([])])
    assert kept == [] and d.metrics.rows == 0 and d.keep.size == 0


@settings(max_examples=60, deadline=None)
@given(
    ids=st.lists(st.integers(0, 40), min_size=1, max_size=120),
    cuts=st.lists(st.integers(0, 120), max_size=5),
    seed=st.integers(0, 2**16),
)
def test_any_batch_plan_and_row_order_keep_each_id_exactly_once(ids, cuts, seed):
    """No loss, no duplicate: every id is kept once, in the batch of its first delivery."""
    names = [f"id{i}" for i in ids]
    bounds = sorted({0, len(names), *[min(c, len(names)) for c in cuts]})
    rng = np.random.default_rng(seed)
    batches, first_batch = [], {}
    for b, (lo, hi) in enumerate(itertools.pairwise(bounds)):
        rows = rng.permutation(np.arange(lo, hi))  # rows arrive in any order within a batch
        batches.append(keys([names[i] for i in rows], offsets=rows.tolist()))
        for i in range(lo, hi):
            first_batch.setdefault(names[i], b)
    kept, _, _ = run(batches, config(capacity=50))
    flat = [x for batch in kept for x in batch]
    assert sorted(flat) == sorted(set(names))
    for b, batch in enumerate(kept):
        assert all(first_batch[x] == b for x in batch)


# -- the versioned filter state ------------------------------------------------------------


def test_state_store_reads_the_newest_version_below_the_batch_and_prunes(tmp_path):
    store = BloomStateStore(tmp_path, keep=2)
    assert store.load_before(0) == (None, {})
    store.save(0, {0: b"zero"})
    store.save(1, {0: b"one", 3: b"three"})
    assert store.load_before(1) == (0, {0: b"zero"})
    assert store.load_before(2) == (1, {0: b"one", 3: b"three"})
    store.save(2, {0: b"two"})
    assert store.versions() == [1, 2]  # version 0 is older than any replay can need
    store.save(2, {0: b"two"})  # a replay rewrites its version identically
    assert store.load_before(3) == (2, {0: b"two"})


def test_state_ahead_of_the_query_means_a_reset_checkpoint(tmp_path):
    store = BloomStateStore(tmp_path)
    store.save(5, {0: b"x"})
    with pytest.raises(DedupStateError, match="checkpoint was reset"):
        store.load_before(3)


def test_a_damaged_state_file_is_a_typed_error(tmp_path):
    store = BloomStateStore(tmp_path)
    store.save(0, {0: b"filter bytes"})
    path = next(tmp_path.glob("*.bloom"))
    data = bytearray(path.read_bytes())
    data[-6] ^= 0xFF
    path.write_bytes(bytes(data))
    with pytest.raises(DedupStateError, match="checksum"):
        store.load_before(1)


def test_bucket_state_a_retried_task_reads_the_version_below_the_batch_not_its_own(tmp_path):
    """Attempt 0 of batch 3's task saved bucket 1's version 3, then failed: attempt 1 (and any
    replay of batch 3) must start from the version below 3, as attempt 0 did."""
    store = BucketStateStore(tmp_path, keep=2)
    store.save(1, 2, b"after 2")
    store.save(1, 3, b"after 3, attempt 0")
    assert store.load_before(1, 3) == (2, b"after 2")
    assert store.load_before(0, 3) == (None, None)  # a bucket without state yet
    store.save(1, 3, b"after 3, attempt 0")  # the retry rewrites the same bytes
    assert store.load_before(1, 4) == (3, b"after 3, attempt 0")
    assert store.buckets() == [1]


def test_two_attempts_saving_one_version_at_once_leave_it_whole(tmp_path):
    """A speculative copy of a task saves the same version while the first attempt's save is
    still writing: neither write may land in the other's file (nor in the saved version)."""
    store = BloomStateStore(tmp_path)
    tmp_path.mkdir(exist_ok=True)
    other = open(tmp_path / f"{5:020d}.tmp", "wb")  # the other attempt, mid-save
    store.save(5, {0: b"x" * 100})
    other.write(b"\0" * 16)  # the other attempt goes on writing
    other.close()
    assert store.load_before(6) == (5, {0: b"x" * 100})


def test_state_store_keeps_at_least_two_versions(tmp_path):
    with pytest.raises(ConfigError):
        BloomStateStore(tmp_path, keep=1)


def test_catalog_columns_are_the_documented_ones():
    assert CATALOG_SCHEMA.names == [
        "generation",
        "bucket",
        "hash",
        "record_id",
        "coords",
        "batch_id",
    ]
