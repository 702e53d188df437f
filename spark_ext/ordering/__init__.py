"""Deterministic ordering: release elements in a total order once it is ensured, then fold.

The release rule, state bound and guarantee: docs/design.md, "Ordering". Modules: ``config``,
``buffer`` (pure), ``fold`` (the caller's :class:`KeyedFold`), ``shard`` (one shard's step,
pure), ``operator`` (the Spark side), ``errors``; their public names are public here.

>>> config = OrderingConfig(partitions=(("readings", 0), ("readings", 1)))
>>> out = order_and_fold(readings_df, config, my_fold)   # doctest: +SKIP
>>> out.writeStream.foreachBatch(DedupSink(None, out_path, "ewma")).start()  # doctest: +SKIP
"""

from spark_ext.ordering import buffer, config, errors, fold, operator, shard
from spark_ext.ordering.buffer import *  # noqa: F403
from spark_ext.ordering.config import *  # noqa: F403
from spark_ext.ordering.errors import *  # noqa: F403
from spark_ext.ordering.fold import *  # noqa: F403
from spark_ext.ordering.operator import *  # noqa: F403
from spark_ext.ordering.shard import *  # noqa: F403

__all__ = [name for m in (buffer, config, errors, fold, operator, shard) for name in m.__all__]
