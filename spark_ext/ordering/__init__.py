"""Deterministic ordering: release elements in a total order once it is ensured, then fold.

The release rule, state bound and guarantee: docs/design.md, "Ordering". Modules: ``config``
(:class:`OrderingConfig`), ``buffer`` (:class:`OrderingBuffer`, pure), ``fold``
(:class:`KeyedFold`, the caller's fold), ``shard`` (:class:`ShardProcessor`, one shard's step,
pure), ``operator`` (the Spark side), ``errors``.

Example
-------
>>> from spark_ext.ordering import OrderingConfig, order_and_fold
>>> config = OrderingConfig(partitions=(("readings", 0), ("readings", 1)))
>>> out = order_and_fold(readings_df, config, my_fold)   # doctest: +SKIP
>>> out.writeStream.foreachBatch(DedupSink(None, out_path, "ewma")).start()  # doctest: +SKIP
"""

from spark_ext.ordering.buffer import (
    CLOSED,
    ELEMENT_COLUMNS,
    ORDER_COLUMNS,
    OrderingBuffer,
    Released,
)
from spark_ext.ordering.config import OrderingConfig
from spark_ext.ordering.errors import OrderingBufferFull
from spark_ext.ordering.fold import FoldState, KeyedFold
from spark_ext.ordering.operator import (
    INPUT_COLUMNS,
    end_control_rows,
    mark_progress,
    order_and_fold,
)
from spark_ext.ordering.shard import (
    KIND_END,
    KIND_PROGRESS,
    KIND_ROW,
    MARKED_SCHEMA,
    ShardProcessor,
    output_schema,
    result_columns,
)

__all__ = [
    "CLOSED",
    "ELEMENT_COLUMNS",
    "INPUT_COLUMNS",
    "KIND_END",
    "KIND_PROGRESS",
    "KIND_ROW",
    "MARKED_SCHEMA",
    "ORDER_COLUMNS",
    "FoldState",
    "KeyedFold",
    "OrderingBuffer",
    "OrderingBufferFull",
    "OrderingConfig",
    "Released",
    "ShardProcessor",
    "end_control_rows",
    "mark_progress",
    "order_and_fold",
    "output_schema",
    "result_columns",
]
