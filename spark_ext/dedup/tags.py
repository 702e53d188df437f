"""The ``_kind`` values that :func:`~spark_ext.dedup.operator.deduplicate` and
:func:`spark_ext.ordering.order_and_fold` tag rows with, for
:class:`~spark_ext.dedup.sink.DedupSink`."""

from __future__ import annotations

__all__ = ["KIND_DUPLICATE", "KIND_LATE", "KIND_METRICS", "KIND_NEW"]

KIND_NEW = "new"  # kept: the first copy of its id in the total order
KIND_DUPLICATE = "duplicate"  # a later copy (emitted only on request; the sink drops it)
KIND_METRICS = "metrics"  # one per bucket and batch: ``_detail`` = DedupMetrics as JSON
KIND_LATE = "late"  # after its place in the order was released (ordering buffer only)
