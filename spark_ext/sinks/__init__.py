"""Exactly-once sinks for Delta and Kafka, on one commit protocol keyed by (sink id, batch id).

See :mod:`spark_ext.sinks.protocol` for the numbered steps, :mod:`spark_ext.sinks.api` for the
calls a pipeline author makes, :mod:`spark_ext.sinks.errors` for what can go wrong.
"""

from spark_ext.sinks.api import Trigger, exactly_once_to_delta, exactly_once_to_kafka
from spark_ext.sinks.errors import (
    CommitUncertainError,
    ConcurrentWriterError,
    SchemaMismatchError,
    SinkConfigError,
    SinkError,
    StagedDataMissingError,
    TransactionTimeoutError,
    WriterFencedError,
)

__all__ = [
    "CommitUncertainError",
    "ConcurrentWriterError",
    "SchemaMismatchError",
    "SinkConfigError",
    "SinkError",
    "StagedDataMissingError",
    "TransactionTimeoutError",
    "Trigger",
    "WriterFencedError",
    "exactly_once_to_delta",
    "exactly_once_to_kafka",
]
