"""The commit protocol of the exactly-once sinks, keyed by (sink id, batch id).

See :mod:`spark_ext.sinks.protocol` for the numbered steps, :mod:`spark_ext.sinks.errors` for
what can go wrong, :mod:`spark_ext.sinks.trigger` for the query options every sink checks.
The Delta and Kafka sinks themselves are in :mod:`connectors` (``connectors.sinks`` has the one
call per sink a pipeline author makes): connectors sit above this package, never below it.
"""

from spark_ext.sinks.errors import (
    BatchRegressionError,
    ClientStalledError,
    CommitUncertainError,
    ConcurrentWriterError,
    DeltaTxnExpiredError,
    DriverFencedError,
    NotAStreamTaskError,
    PartitionOutOfRangeError,
    ProduceFailedError,
    ProgressInconsistentError,
    ReplayUnprovableError,
    SchemaMismatchError,
    SinkConfigError,
    SinkError,
    SinkOwnerError,
    StagedDataMissingError,
    TopicMissingError,
    TransactionExpiredError,
    TransactionTimeoutError,
    UnsupportedTableFeatureError,
    WriterFencedError,
)
from spark_ext.sinks.trigger import Trigger

__all__ = [
    "BatchRegressionError",
    "ClientStalledError",
    "CommitUncertainError",
    "ConcurrentWriterError",
    "DeltaTxnExpiredError",
    "DriverFencedError",
    "NotAStreamTaskError",
    "PartitionOutOfRangeError",
    "ProduceFailedError",
    "ProgressInconsistentError",
    "ReplayUnprovableError",
    "SchemaMismatchError",
    "SinkConfigError",
    "SinkError",
    "SinkOwnerError",
    "StagedDataMissingError",
    "TopicMissingError",
    "TransactionExpiredError",
    "TransactionTimeoutError",
    "Trigger",
    "UnsupportedTableFeatureError",
    "WriterFencedError",
]
