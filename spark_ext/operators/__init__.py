"""Stateful operators flushed when their substream (window) ends; run by :mod:`spark_ext.streaming`."""

from spark_ext.operators.aggregations import Count, Max, Mean, Sum, UserFunction
from spark_ext.operators.base import Group, OperatorState, SubstreamOperator
from spark_ext.operators.ewma import EwmaOperator, ewma
from spark_ext.operators.join import WindowJoin
from spark_ext.operators.session import SessionWindow
from spark_ext.operators.windows import WindowAggregate

__all__ = [
    "Count",
    "EwmaOperator",
    "Group",
    "Max",
    "Mean",
    "OperatorState",
    "SessionWindow",
    "SubstreamOperator",
    "Sum",
    "UserFunction",
    "WindowAggregate",
    "WindowJoin",
    "ewma",
]
