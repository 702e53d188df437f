"""A batch (or one bucket of it) decided at once, as pure logic (NumPy and Arrow, no Spark):
:func:`decide_batch`, the decision of ``DeltaDedupSink``'s tasks (docs/design.md, "Dedup")."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from spark_ext.dedup.bucket import DUPLICATE, NEW, decide_rows
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
    null), whatever its row order, bucket by bucket with :func:`decide_rows`: a live catalog
    row of an earlier batch is a duplicate; ``blooms`` (bucket -> filters) updated in place."""
    h = table.column(KEY_HASH).to_numpy().astype(np.int64).view(np.uint64)
    et = table.column(KEY_ET).to_numpy().astype(np.int64) // 1000
    bucket = (h % np.uint64(config.buckets)).astype(np.int32)
    keep = np.zeros(len(h), dtype=bool)
    generation = np.zeros(len(h), dtype=np.int64)
    parts = []
    for b in np.unique(bucket):
        mine = bucket == b
        rows = table if mine.all() else table.filter(pa.array(mine))
        bloom = blooms.setdefault(int(b), config.new_bloom())
        ids = rows.column(KEY_ID)

        def answer(
            asked: np.ndarray, hb: np.ndarray = h[mine], ids: pa.Array = ids, bloom=bloom
        ) -> np.ndarray:
            found = lookup(hb[asked].view(np.int64), batch_id)
            live = found.column("generation").to_numpy() >= (bloom.oldest_kept or 0)
            known = set(found.column("record_id").filter(pa.array(live)).to_pylist())
            names = ids.take(pa.array(asked)).to_pylist()
            return np.array([DUPLICATE if i in known else NEW for i in names], dtype=np.int8)

        def order(at: np.ndarray, rows: pa.Table = rows, e: np.ndarray = et[mine]) -> list:
            coords = [
                rows.column(c).take(pa.array(at)) for c in reversed(config.coordinate_columns)
            ]
            return [*[c.to_numpy(zero_copy_only=False) for c in coords], e[at]]

        keep[mine], part = decide_rows(bloom, h[mine], et[mine], ids, answer, order)
        generation[mine] = bloom.generation_of(et[mine])
        parts.append(part)
    metrics = DedupMetrics.of_buckets(parts)
    metrics.state_bytes = sum(b.nbytes for b in blooms.values())
    metrics.newest_generation = max(
        (b.newest for b in blooms.values() if b.newest is not None), default=-1
    )
    return BatchDecision(keep, bucket, generation, metrics)
