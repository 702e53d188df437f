"""Tracked queries: the tracker (:mod:`spark_ext.tracker`) and the operators
(:mod:`spark_ext.operators`) combined into a Spark plan.

This layer sits above both (docs/design.md, "Layers"; "Tracked queries").

* :mod:`~spark_ext.streaming.query` -- :class:`TrackedStream`, :class:`TrackedQuery`, :class:`Closing`
* :mod:`~spark_ext.streaming.gate` -- per-partition frontiers, late rows (pure)
* :mod:`~spark_ext.streaming.runner` -- one operator call on one group (pure)
* :mod:`~spark_ext.streaming.stages` -- the executor side of both stages
* :mod:`~spark_ext.streaming.handler` -- the driver's per-batch steps (writers: any ``foreachBatch`` function)
* :mod:`~spark_ext.streaming.tester` -- in-memory testers (no Spark)
* ``shard`` (a shard's release, pure), ``envelope`` (the rows between stages), ``placement``
  (shard keys), ``checks`` (start-up checks), ``idle`` (the idle-partition policy)
"""

from spark_ext.streaming.envelope import LATE_COLUMNS
from spark_ext.streaming.handler import BatchHandler, forward_records
from spark_ext.streaming.idle import IdlePolicy
from spark_ext.streaming.query import Closing, TrackedQuery, TrackedStream

__all__ = [
    "LATE_COLUMNS",
    "BatchHandler",
    "Closing",
    "IdlePolicy",
    "TrackedQuery",
    "TrackedStream",
    "forward_records",
]
