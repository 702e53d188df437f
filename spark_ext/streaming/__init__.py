"""Tracked queries: the tracker and the operators combined into a Spark plan, a layer above both
(docs/design.md, "Layers"; "Tracked queries"). ``query`` (the API), ``gate`` and ``shard`` (pure
stages), ``stages`` (their Spark side), ``handler`` (the driver's steps), ``driver`` and ``batch``
(the driver path), ``tester`` (in memory), ``envelope``, ``placement``, ``checks``, ``idle``.
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
