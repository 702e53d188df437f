"""Tracked queries: the tracker (:mod:`spark_ext.tracker`) and the operators
(:mod:`spark_ext.operators`) combined into a Spark plan.

This layer sits above both; each of them imports only downward (docs/design.md, layers).

* :mod:`~spark_ext.tracked.query` -- :class:`TrackedStream`, :class:`TrackedQuery`, :class:`Closing`
* :mod:`~spark_ext.tracked.gate` -- per-partition frontiers, late rows (pure)
* :mod:`~spark_ext.tracked.runner` -- one operator call on one group (pure)
* :mod:`~spark_ext.tracked.stages` -- the executor side of both stages
* :mod:`~spark_ext.tracked.handler` -- the driver's per-batch steps (writers: any ``foreachBatch`` function)
* :mod:`~spark_ext.tracked.tester` -- in-memory testers (no Spark)
"""

from spark_ext.tracked.envelope import LATE_COLUMNS
from spark_ext.tracked.handler import BatchHandler, forward_records
from spark_ext.tracked.idle import IdlePolicy
from spark_ext.tracked.query import Closing, TrackedQuery, TrackedStream

__all__ = [
    "LATE_COLUMNS",
    "BatchHandler",
    "Closing",
    "IdlePolicy",
    "TrackedQuery",
    "TrackedStream",
    "forward_records",
]
