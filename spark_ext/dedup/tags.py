"""The ``_kind`` values that :func:`~spark_ext.dedup.operator.deduplicate` and
:func:`spark_ext.ordering.order_and_fold` tag rows with, for
:class:`~spark_ext.dedup.sink.DedupSink`."""

from __future__ import annotations

import warnings

import pandas as pd

__all__ = ["KIND_DUPLICATE", "KIND_LATE", "KIND_METRICS", "KIND_NEW", "with_metrics_row"]

KIND_NEW = "new"  # kept: the first copy of its id in the total order
KIND_DUPLICATE = "duplicate"  # a later copy (emitted only on request; the sink drops it)
KIND_METRICS = "metrics"  # one per bucket and batch: ``_detail`` = DedupMetrics as JSON
KIND_LATE = "late"  # after its place in the order was released (ordering buffer only)


def with_metrics_row(rows: pd.DataFrame, bucket: int, detail: str) -> pd.DataFrame:
    """``rows`` and, last, the ``metrics`` row of ``bucket`` (``_detail``; other columns null)."""
    row = {
        **dict.fromkeys(rows.columns),
        "_kind": KIND_METRICS,
        "_bucket": bucket,
        "_detail": detail,
    }
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # all-null columns of the row
        return pd.concat([rows, pd.DataFrame([row], columns=rows.columns)], ignore_index=True)
