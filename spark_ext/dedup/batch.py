"""A batch (or one bucket of it) decided at once, as pure logic (NumPy and Arrow, no Spark):
:func:`decide_batch`, the decision of ``DeltaDedupSink``'s tasks (docs/design.md, "Dedup")."""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from spark_ext.dedup.config import DedupConfig
from spark_ext.dedup.filters import RotatingBloom
from spark_ext.dedup.metrics import DedupMetrics

__all__ = [
    "KEY_ET",
    "KEY_HASH",
    "KEY_ID",
    "REASON_NULL_KEY",
    "BatchDecision",
    "HashLookup",
    "decide_batch",
]

#: Quarantine reason of a row whose id, event time or a coordinate is null.
REASON_NULL_KEY = "null_dedup_key"

#: Key columns of a batch to decide: the id's ``xxhash64`` (int64), the id (string) and the
#: event time (int64 microseconds); the coordinate columns follow under their own names.
KEY_HASH, KEY_ID, KEY_ET = "_dedup_hash", "_dedup_id", "_dedup_et_us"

#: ``lookup(hashes, before_batch) -> Arrow table`` of catalog rows (``bucket``, ``generation``,
#: ``hash``, ``record_id``) whose hash is one of ``hashes`` and whose batch is below
#: ``before_batch``.
HashLookup = Callable[[np.ndarray, int], pa.Table]


@dataclass
class BatchDecision:
    """What to do with each row of a batch (arrays in the collected rows' order)."""

    keep: np.ndarray
    bucket: np.ndarray
    generation: np.ndarray
    metrics: DedupMetrics


def decide_batch(
    table: pa.Table,
    config: DedupConfig,
    blooms: dict[int, RotatingBloom],
    lookup: HashLookup,
    batch_id: int,
) -> BatchDecision:
    """Decide every row of ``table`` (the ``KEY_*`` columns and the coordinate columns, none
    null), whatever its row order; ``blooms`` (bucket -> filters) are updated in place."""
    n = table.num_rows
    metrics = DedupMetrics(rows=n)
    if n == 0:
        metrics.state_bytes = sum(b.nbytes for b in blooms.values())
        empty = np.zeros(0, dtype=np.int64)
        return BatchDecision(np.zeros(0, bool), empty.astype(np.int32), empty, metrics)
    h = table.column(KEY_HASH).to_numpy().astype(np.int64).view(np.uint64)
    et = table.column(KEY_ET).to_numpy().astype(np.int64) // 1000
    bucket = (h % np.uint64(config.buckets)).astype(np.int32)

    maybe = np.zeros(n, dtype=bool)
    generation = np.zeros(n, dtype=np.int64)
    floors = np.zeros(config.buckets, dtype=np.int64)
    for b in np.unique(bucket):
        sel = np.flatnonzero(bucket == b)
        bloom = blooms.setdefault(int(b), config.new_bloom())
        maybe[sel] = bloom.check_and_add(h[sel], et[sel])
        generation[sel] = bloom.generation_of(et[sel])
        floors[b] = bloom.oldest_kept or 0

    # The catalog is read (in the background) while the batch's own duplicates are found.
    maybe_rows = np.flatnonzero(maybe)
    with ThreadPoolExecutor(1) as pool:
        found_future = pool.submit(lookup, h[maybe_rows].view(np.int64), batch_id)

        # In-batch duplicates, exactly: only rows sharing a hash are ordered and compared.
        sorted_h = np.sort(h)
        repeated = np.unique(sorted_h[1:][sorted_h[1:] == sorted_h[:-1]])
        in_batch = np.zeros(n, dtype=bool)
        if len(repeated):
            at = np.minimum(np.searchsorted(repeated, h), len(repeated) - 1)
            shared = np.flatnonzero(repeated[at] == h)
            rows = pa.array(shared)
            coords = [
                table.column(c).take(rows).to_numpy(zero_copy_only=False)
                for c in reversed(config.coordinate_columns)
            ]
            shared = shared[np.lexsort([*coords, et[shared]])]  # the total order
            ids = table.column(KEY_ID).take(pa.array(shared)).to_pandas()
            in_batch[shared] = ids.duplicated(keep="first").to_numpy()
        found = found_future.result()

    ask = np.flatnonzero(maybe & ~in_batch)
    dropped = in_batch.copy()
    if len(ask):
        live = found.column("generation").to_numpy() >= floors[found.column("bucket").to_numpy()]
        known = set(found.column("record_id").filter(pa.array(live)).to_pylist())
        asked_ids = table.column(KEY_ID).take(pa.array(ask)).to_pylist()
        hit = np.fromiter((rid in known for rid in asked_ids), dtype=bool, count=len(ask))
        dropped[ask[hit]] = True
        metrics.catalog_duplicates = int(hit.sum())
        metrics.false_positives = len(ask) - metrics.catalog_duplicates
    metrics.bloom_negative = int((~maybe & ~in_batch).sum())
    metrics.catalog_lookups = len(ask)
    metrics.batch_duplicates = int(in_batch.sum())
    metrics.state_bytes = sum(b.nbytes for b in blooms.values())
    metrics.newest_generation = max(
        (b.newest for b in blooms.values() if b.newest is not None), default=-1
    )
    return BatchDecision(~dropped, bucket, generation, metrics)
