"""The dedup decision, as pure logic (NumPy and Arrow, no Spark): the Bloom filter first, the
catalog on "maybe" (:func:`decide_rows`, the one rule of every dedup path: :class:`BucketDedup`
for :func:`~spark_ext.dedup.operator.deduplicate` and the ordering buffer, :func:`decide_batch`
for ``DeltaDedupSink``'s tasks; docs/design.md, "Dedup")."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import numpy as np
import pandas as pd
import pyarrow as pa

from spark_ext.dedup.config import DedupConfig
from spark_ext.dedup.filters import RotatingBloom
from spark_ext.dedup.metrics import DedupMetrics
from spark_ext.hashing import stable_hash64

__all__ = [
    "DUPLICATE",
    "KEY_ET",
    "KEY_HASH",
    "KEY_ID",
    "NEW",
    "REASON_NULL_KEY",
    "SELF",
    "BatchDecision",
    "BucketDedup",
    "CatalogAnswer",
    "CatalogLookup",
    "HashLookup",
    "coords_string",
    "decide_batch",
    "decide_rows",
]

#: The catalog's answer for a row the filters may have seen: no copy (a false positive),
#: another copy kept, or this very delivery (kept by an earlier attempt of the batch).
NEW, DUPLICATE, SELF = 0, 1, 2

#: ``answer(rows) -> codes``: :data:`NEW`, :data:`DUPLICATE` or :data:`SELF` per row position.
CatalogAnswer = Callable[[np.ndarray], np.ndarray]


def _later_copies(
    ids: np.ndarray | pa.Array,
    hashes: np.ndarray,
    order: Callable[[np.ndarray], list[np.ndarray]] | None,
) -> np.ndarray:
    """Rows that are not their id's first copy in the total order: the rows' order, or
    ``np.lexsort(order(rows))`` of only the rows sharing a hash."""
    if order is None:
        return np.asarray(pd.Series(ids).duplicated(keep="first").to_numpy(), dtype=bool)
    later = np.zeros(len(hashes), dtype=bool)
    sorted_h = np.sort(hashes)
    repeated = np.unique(sorted_h[1:][sorted_h[1:] == sorted_h[:-1]])
    if len(repeated):
        at = np.minimum(np.searchsorted(repeated, hashes), len(repeated) - 1)
        shared = np.flatnonzero(repeated[at] == hashes)
        shared = shared[np.lexsort(order(shared))]
        copies = ids.take(pa.array(shared)).to_pandas()
        later[shared] = copies.duplicated(keep="first").to_numpy()
    return later


def decide_rows(
    bloom: RotatingBloom,
    hashes: np.ndarray,
    event_time_ms: np.ndarray,
    ids: np.ndarray | pa.Array,
    answer: CatalogAnswer,
    order: Callable[[np.ndarray], list[np.ndarray]] | None = None,
) -> tuple[np.ndarray, DedupMetrics]:
    """Keep-mask of one bucket's rows (``hashes``: uint64 of the ids): the first copy of an id in
    the total order (:func:`_later_copies`) unless the catalog answers :data:`DUPLICATE`;
    ``bloom`` is updated in place (docs/design.md, "Dedup")."""
    metrics = DedupMetrics(rows=len(hashes))
    maybe = bloom.check_and_add(hashes, np.asarray(event_time_ms))
    maybe_rows = np.flatnonzero(maybe)
    with ThreadPoolExecutor(1) as pool:  # the catalog is read while the batch's copies are found
        answered = pool.submit(answer, maybe_rows) if len(maybe_rows) else None
        later = _later_copies(ids, hashes, order)
        codes = np.full(len(hashes), NEW, dtype=np.int8)
        if answered is not None:
            codes[maybe_rows] = answered.result()
    ask = maybe & ~later
    metrics.catalog_lookups = int(ask.sum())
    metrics.catalog_duplicates = int((ask & (codes == DUPLICATE)).sum())
    metrics.replayed_self = int((ask & (codes == SELF)).sum())
    metrics.false_positives = int((ask & (codes == NEW)).sum())
    metrics.bloom_negative = int((~maybe & ~later).sum())
    metrics.batch_duplicates = int(later.sum())
    metrics.state_bytes = bloom.nbytes
    metrics.newest_generation = -1 if bloom.newest is None else bloom.newest
    return ~later & ~(ask & (codes == DUPLICATE)), metrics


def coords_string(frame: pd.DataFrame, columns: Sequence[str]) -> pd.Series:
    """One string per row that identifies the delivery, e.g. ``"topic/2/1041"``."""
    out = frame[columns[0]].astype(str)
    for col in columns[1:]:
        out = out + "/" + frame[col].astype(str)
    return out


#: ``lookup(bucket, ids, min_generation) -> {record_id: coords}`` of the kept copies.
CatalogLookup = Callable[[int, list[str], int], dict[str, str]]


@dataclass
class BucketDedup:
    """The filters of one bucket, and :func:`decide_rows` with the catalog asked by id."""

    config: DedupConfig
    bucket: int
    bloom: RotatingBloom = field(init=False)

    def __post_init__(self) -> None:
        self.bloom = self.config.new_bloom()

    def load(self, state: bytes | None) -> None:
        if state:
            self.bloom.load_bytes(state)

    def dump(self) -> bytes:
        return self.bloom.to_bytes()

    def decide(
        self,
        ids: np.ndarray,
        event_time_ms: np.ndarray,
        coords: Sequence[str] | Callable[[np.ndarray], Sequence[str]],
        lookup: CatalogLookup,
        hashes: np.ndarray | None = None,
    ) -> tuple[np.ndarray, DedupMetrics]:
        """Keep-mask for rows in their total order; ``coords``: the rows' coordinate strings, or
        a function of row positions giving them (called for the rows looked up only); a kept
        copy with the row's own coordinates is :data:`SELF`; ``hashes``: the ids'
        ``stable_hash64`` if the caller has them."""

        def answer(rows: np.ndarray) -> np.ndarray:
            asked = [str(x) for x in ids[rows]]
            floor = self.bloom.oldest_kept
            found = lookup(self.bucket, asked, 0 if floor is None else floor)
            mine = coords(rows) if callable(coords) else [coords[int(i)] for i in rows]
            stored = [found.get(i) for i in asked]
            codes = [
                NEW if s is None else SELF if s == m else DUPLICATE
                for s, m in zip(stored, mine, strict=True)
            ]
            return np.array(codes, dtype=np.int8)

        if hashes is None:
            hashes = stable_hash64(ids)
        return decide_rows(self.bloom, hashes, event_time_ms, ids, answer)


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
