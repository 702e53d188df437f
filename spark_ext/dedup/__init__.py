"""Dedup: exactly once = at least once + deduplication, state bounded (docs/design.md, "Dedup").

=================  ===========================================================================
``filters``        :class:`BloomFilter`, :class:`RotatingBloom` (filters by event-time generation)
``config``         :class:`DedupConfig`: what to deduplicate on, validated when built
``metrics``        :class:`DedupMetrics`: counters add up, gauges (state size) do not
``catalog``        :class:`DedupCatalog`: the exact catalog, one Delta schema for every writer
``bucket``         :class:`BucketDedup`: one bucket's decision (Bloom, in-batch, catalog)
``batch``          :func:`decide_batch`: a batch (or a bucket of it) decided at once
``state``          :class:`BloomStateStore`, :class:`BucketStateStore`: versioned filter
                   state outside Spark (per bucket for the Delta dedup sink's tasks)
``tags``           the ``_kind`` values of tagged rows (``KIND_*``)
``operator``       :func:`deduplicate`: the Spark stateful operator (filters in Spark state)
``sink``           :class:`DedupSink`: ``foreachBatch`` sink of tagged rows
``errors``         one class per failure kind
=================  ===========================================================================

:func:`deduplicate` + :class:`DedupSink`, or ``connectors.delta.dedup_sink.DeltaDedupSink``;
both use one :class:`DedupConfig` and catalog. Importing this package declares its fault points.

>>> DedupConfig(catalog_path="var/catalog", capacity=1_000, buckets=2).capacity_per_bucket
500
"""

from __future__ import annotations

from spark_ext.dedup.batch import BatchDecision, decide_batch
from spark_ext.dedup.bucket import BucketDedup
from spark_ext.dedup.catalog import CATALOG_SCHEMA, DedupCatalog
from spark_ext.dedup.config import DedupConfig
from spark_ext.dedup.errors import (
    BloomFormatError,
    DedupError,
    DedupInputError,
    DedupStateError,
    LateRowsWithoutQuarantineError,
)
from spark_ext.dedup.filters import BloomFilter, RotatingBloom
from spark_ext.dedup.metrics import DedupMetrics
from spark_ext.dedup.operator import deduplicate
from spark_ext.dedup.sink import AFTER_CATALOG, AFTER_OUTPUT, DedupSink
from spark_ext.dedup.state import BloomStateStore, BucketStateStore
from spark_ext.dedup.tags import KIND_DUPLICATE, KIND_LATE, KIND_METRICS, KIND_NEW

__all__ = [
    "AFTER_CATALOG",
    "AFTER_OUTPUT",
    "CATALOG_SCHEMA",
    "KIND_DUPLICATE",
    "KIND_LATE",
    "KIND_METRICS",
    "KIND_NEW",
    "BatchDecision",
    "BloomFilter",
    "BloomFormatError",
    "BloomStateStore",
    "BucketDedup",
    "BucketStateStore",
    "DedupCatalog",
    "DedupConfig",
    "DedupError",
    "DedupInputError",
    "DedupMetrics",
    "DedupSink",
    "DedupStateError",
    "LateRowsWithoutQuarantineError",
    "RotatingBloom",
    "decide_batch",
    "deduplicate",
]
