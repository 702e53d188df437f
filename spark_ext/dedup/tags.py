"""The tag columns of a deduplicated (or ordered) stream: what each row is, before the sink.

:func:`~spark_ext.dedup.operator.deduplicate` and :func:`spark_ext.ordering.order_and_fold`
tag every row with ``_kind`` (one of the ``KIND_*`` values), and emit one ``metrics`` row per
bucket and batch whose ``_detail`` is :class:`~spark_ext.dedup.metrics.DedupMetrics` as JSON.
:class:`~spark_ext.dedup.sink.DedupSink` writes ``new`` rows to the output and ``late`` rows to
the quarantine; ``duplicate`` rows (only emitted on request) are dropped.
"""

from __future__ import annotations

__all__ = ["KIND_DUPLICATE", "KIND_LATE", "KIND_METRICS", "KIND_NEW"]

#: A row kept: the first copy of its id in the total order.
KIND_NEW = "new"
#: A later copy of an id already kept (in this batch, or found in the catalog).
KIND_DUPLICATE = "duplicate"
#: One per bucket and batch: ``_detail`` holds the bucket's metrics as JSON.
KIND_METRICS = "metrics"
#: A row that arrived after its place in the order was released (ordering buffer only).
KIND_LATE = "late"
