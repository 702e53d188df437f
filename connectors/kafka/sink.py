"""Exactly-once Kafka sinks: two-phase (Kafka transactions) and idempotent (record ids).

Where the batch id is recorded
------------------------------
Both sinks record "sink S has written batch B" as committed offsets of a *sink-progress
consumer group* ``spark_ext.sink:<sink id>`` on the output topic
(:class:`~connectors.kafka.progress.SinkProgress`).

Two-phase, a transaction per task (default): :mod:`connectors.kafka.slices`
---------------------------------------------------------------------------------
Records go from the tasks straight to Kafka, each task in its own transaction; the driver
only records the batch. ``read_committed`` consumers see a batch task by task.

Two-phase, one transaction per batch: ``atomicity="batch"``
------------------------------------------------------------
:class:`KafkaTwoPhaseDataSource`, format ``spark_ext_kafka_2pc``. For those who need a whole batch visible at once: tasks stage, the driver writes ONE
transaction per batch (so every record passes through the driver's one producer):

1. ``staged`` -- each task writes its rows (``key``, ``value``, ``partition``) to an Arrow IPC
   file under ``staging_dir/<sink id>/b<batch>/``; the commit message names the file
   (:mod:`connectors.kafka.settings`).
2. ``before_commit`` -- the driver's ``commit(messages, batchId)`` checks its run epoch
   (:class:`~spark_ext.sinks.errors.DriverFencedError` for a driver of an older start, before
   it touches the transactional id), starts a transactional producer with
   ``transactional.id = spark_ext.tx:<sink id>:<topic>:commit`` and calls ``init_transactions``,
   which completes or aborts whatever transaction a killed driver left open. Only then it
   reads the recorded batch: equal is a replay, skipped; lower raises
   :class:`~spark_ext.sinks.errors.BatchRegressionError` (X1).
3. ``committed`` -- ONE transaction: every staged record, ``flush()``, every produce future
   checked (K1: kafka-python commits a transaction whose records expired after
   ``delivery_timeout_ms``; any failure aborts it and raises
   :class:`~spark_ext.sinks.errors.ProduceFailedError`), then the progress offset
   (``send_offsets_to_transaction``) holding the batch id, then commit. A lost answer is
   settled by a fresh producer and the recorded batch read back; a transaction that outlived
   ``transaction_timeout_ms`` (aborted by the broker) is retried once, then
   :class:`~spark_ext.sinks.errors.TransactionExpiredError` names the setting (K5).
   Driver side: :mod:`connectors.kafka.commit`.
4. ``cleaned`` -- the batch's staging folder is deleted.

What consumers see: a ``read_committed`` consumer sees each batch whole, at once, or not at
all. A ``read_uncommitted`` consumer also sees the records of aborted transactions (a batch
retried after an undelivered record or an expired transaction, or a driver killed mid-commit),
so it may see records twice.

Bound and cost: the whole batch is one transaction, so it must commit within
``transaction_timeout_ms`` (at most the broker's ``transaction.max.timeout.ms``, 15 minutes by
default): bound batches with ``maxOffsetsPerTrigger``. Every record is written twice (staging
file, then Kafka) and produced by ONE producer on the driver, so throughput is bounded by a
single kafka-python producer (records do pass through the driver in this mode).
``staging_dir`` must be on a filesystem both the executors and the driver see (the same
requirement as a checkpoint location); the default is under the checkpoint.

Idempotent (:class:`KafkaIdempotentWriter`, for ``foreachBatch``)
----------------------------------------------------------------
In :mod:`connectors.kafka.idempotent`: records go from the tasks straight to the topic
(never through the driver), named by their input coordinates; re-exported here.

Two-phase for ``foreachBatch`` (:class:`KafkaTwoPhaseWriter`)
-------------------------------------------------------------
In :mod:`connectors.kafka.sliced_writer`: the transaction-per-slice sink
(:mod:`connectors.kafka.slices`) as a ``foreachBatch`` function, for writers of tracked
queries and other ``foreachBatch`` pipelines that run with ``spark.speculation`` on;
re-exported here.
"""

from __future__ import annotations

import logging
import os
import uuid
from collections.abc import Iterator, Sequence

import pyarrow as pa
import pyarrow.ipc as ipc
from pyspark.sql.datasource import (
    DataSource,
    DataSourceStreamArrowWriter,
    DataSourceStreamWriter,
    WriterCommitMessage,
)
from pyspark.sql.types import StructType

from connectors.kafka.commit import (
    IN_TRANSACTION,
    KafkaCommitter,
    broker_max_transaction_timeout_ms,
)
from connectors.kafka.idempotent import (
    KafkaIdempotentWriter,
    OutputRegion,
    SliceWriter,
    partition_identity,
    record_id,
    written_ids,
)
from connectors.kafka.progress import Recorded, SinkProgress
from connectors.kafka.records import (
    PRODUCER,
    RECORD_ID_HEADER,
    check_columns,
    current_batch_id,
    task_attempt,
)
from connectors.kafka.settings import KafkaSinkSettings, StagedRecords, staged_records
from connectors.kafka.sliced_writer import KafkaTwoPhaseWriter
from spark_ext.sinks.protocol import KAFKA_TWO_PHASE, abort_batch, commit_batch

log = logging.getLogger(__name__)

__all__ = [
    "FORMAT",
    "IN_TRANSACTION",
    "PRODUCER",
    "RECORD_ID_HEADER",
    "KafkaCommitter",
    "KafkaIdempotentWriter",
    "KafkaSinkSettings",
    "KafkaStagingWriter",
    "KafkaTwoPhaseDataSource",
    "KafkaTwoPhaseWriter",
    "OutputRegion",
    "Recorded",
    "SinkProgress",
    "SliceWriter",
    "StagedRecords",
    "broker_max_transaction_timeout_ms",
    "check_columns",
    "partition_identity",
    "record_id",
    "staged_records",
    "written_ids",
]

FORMAT = "spark_ext_kafka_2pc"


# -- two-phase: step 1, staging on executors ----------------------------------------------
class KafkaStagingWriter(DataSourceStreamArrowWriter):
    """Stages a task's records in an Arrow file; the driver produces them in one transaction."""

    def __init__(self, options: KafkaSinkSettings, schema: StructType) -> None:
        self.options = options
        self.schema = schema

    # 1. staged (executor)
    def write(self, iterator: Iterator[pa.RecordBatch]) -> StagedRecords:
        from pyspark.sql.pandas.types import to_arrow_schema

        partition, attempt = task_attempt()
        batch_id = current_batch_id()
        folder = self.options.batch_dir(batch_id)
        os.makedirs(folder, exist_ok=True)
        path = os.path.join(folder, f"p{partition:05d}-a{attempt}-{uuid.uuid4().hex[:12]}.arrow")
        target = to_arrow_schema(self.schema, timezone="UTC")
        rows = 0
        with pa.OSFile(path, "wb") as sink, ipc.new_file(sink, target) as out:
            for batch in iterator:
                if batch.num_rows:
                    out.write_batch(batch.cast(target) if batch.schema != target else batch)
                    rows += batch.num_rows
        KAFKA_TWO_PHASE.reached(1, batch_id)
        return StagedRecords(path, rows, batch_id, partition)

    def commit(self, messages: Sequence[WriterCommitMessage | None], batchId: int) -> None:
        committer = KafkaCommitter(self.options)
        try:
            commit_batch(committer, batchId, _staged(messages))
        finally:
            committer.close()

    def abort(self, messages: Sequence[WriterCommitMessage | None], batchId: int) -> None:
        committer = KafkaCommitter(self.options)
        try:
            abort_batch(committer, batchId, _staged(messages))
        finally:
            committer.close()


def _staged(messages: Sequence[WriterCommitMessage | None]) -> list[StagedRecords]:
    return [m for m in messages if isinstance(m, StagedRecords)]


class KafkaTwoPhaseDataSource(DataSource):
    """Python data source ``spark_ext_kafka_2pc`` (options: :class:`KafkaSinkSettings`)."""

    @classmethod
    def name(cls) -> str:
        return FORMAT

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        check_columns(schema)
        return KafkaStagingWriter(KafkaSinkSettings.from_options(self.options), schema)
