"""Deterministic ordering as a library: release elements in a total order once it is ensured.

Spark replays a micro-batch with the same offsets, but the order rows reach an operator
(after a shuffle, and across batches whose boundaries depend on how the batches were planned)
is not stable. An order-sensitive fold such as an EWMA then computes different values on a
replay. The buffer fixes the order: per shard, it holds elements sorted by the total order

    t(x) = (event time, source, partition, offset)

and releases an element only when no element with a smaller ``t`` can still arrive:

* **progress**: every source partition has shown an event time past ``t`` (each partition's
  event times are non-decreasing, so a partition that showed ``T`` will send nothing before
  ``T``). Each source task reports its partitions' maximum event time to *every* shard as a
  small progress row (:func:`mark_progress`), so a shard learns about partitions none of its
  keys live in; a row ``is_end=True`` with a null key closes its partition (progress +inf);
* **end event** (optional): a row ``is_end=True`` for a key -- e.g. the tracker's
  substream-end event -- releases everything buffered for that key and drops its state.

Released elements go, in order, through an optional dedup decision
(:class:`spark_ext.dedup.BucketDedup`) and then the caller's fold
(:class:`~spark_ext.ordering.fold.KeyedFold`, a parameter of :func:`order_and_fold`). An element
older than what was already released cannot be put in order: it is emitted as ``late`` (a
duplicate delivery, dropped by dedup, or a genuinely late element, quarantined by the sink).

State per shard (bounded, and reported as ``buffered_rows`` / ``state_bytes``): the buffered
elements (bounded by the partitions' event-time skew; :class:`OrderingBufferFull` past
``max_buffered_rows``), one progress value per partition, one fold value per live key.

Guarantees: for a deterministic input (same records per partition, in offset order), the
released sequence per key -- and so every fold value -- is the same whatever the batch plan
and however often a batch is replayed. Does not guarantee: progress while a partition is idle
(nothing is released until it sends data, a close row or the key's end event).

Modules: ``config`` (:class:`OrderingConfig`), ``buffer`` (:class:`OrderingBuffer`, pure),
``fold`` (:class:`KeyedFold`, the caller's fold), ``shard`` (:class:`ShardProcessor`, one
shard's step, pure), ``operator`` (the Spark side), ``errors``.

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
