"""The dedup decision of one bucket, as pure logic: the Bloom filter first, the catalog on "maybe"
(run by :func:`~spark_ext.dedup.operator.deduplicate` and the ordering buffer)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from spark_ext.dedup.config import DedupConfig
from spark_ext.dedup.filters import RotatingBloom
from spark_ext.dedup.metrics import DedupMetrics
from spark_ext.hashing import stable_hash64

__all__ = ["BucketDedup", "CatalogLookup", "coords_string"]


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
    """The dedup decision of one bucket: the filter, and the catalog asked on "maybe"."""

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
        """Keep-mask for rows in their total order (docs/design.md, "Dedup"); ``coords``: the
        rows' coordinate strings, or a function of row positions giving them (called for the
        rows looked up only); ``hashes``: the ids' ``stable_hash64`` if the caller has them."""
        n = len(ids)
        metrics = DedupMetrics(rows=n)
        if n == 0:
            metrics.state_bytes = self.bloom.nbytes
            return np.zeros(0, dtype=bool), metrics
        if hashes is None:
            hashes = stable_hash64(ids)
        maybe = self.bloom.check_and_add(hashes, np.asarray(event_time_ms))
        in_batch_dup = pd.Series(ids).duplicated(keep="first").to_numpy()
        ask = maybe & ~in_batch_dup
        keep = ~in_batch_dup
        asked_ids = [str(x) for x in ids[ask]]
        floor = self.bloom.oldest_kept
        found = lookup(self.bucket, asked_ids, floor if floor is not None else 0)
        asked = np.flatnonzero(ask)
        if callable(coords):
            asked_coords = list(coords(asked)) if len(asked) else []
        else:
            asked_coords = [coords[int(i)] for i in asked]
        for i, mine in zip(asked, asked_coords, strict=True):
            stored = found.get(str(ids[i]))
            if stored is None:
                metrics.false_positives += 1
            elif stored == mine:
                metrics.replayed_self += 1
            else:
                keep[i] = False
                metrics.catalog_duplicates += 1
        metrics.bloom_negative = int((~maybe & ~in_batch_dup).sum())
        metrics.catalog_lookups = int(ask.sum())
        metrics.batch_duplicates = int(in_batch_dup.sum())
        metrics.state_bytes = self.bloom.nbytes
        newest = self.bloom.newest
        metrics.newest_generation = -1 if newest is None else newest
        return keep, metrics
