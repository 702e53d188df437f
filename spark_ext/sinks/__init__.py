"""The commit protocol of the exactly-once sinks, keyed by (sink id, batch id).

:mod:`~spark_ext.sinks.protocol` numbers the steps, :mod:`~spark_ext.sinks.errors` holds what can
go wrong, :mod:`~spark_ext.sinks.trigger` the query options every sink checks. The sinks
themselves live in :mod:`connectors`, above this package (docs/design.md, "Layers").
"""

from spark_ext.sinks import errors
from spark_ext.sinks.errors import *  # noqa: F403 (every sink error is public here)
from spark_ext.sinks.trigger import Trigger

__all__ = [*errors.__all__, "Trigger"]
