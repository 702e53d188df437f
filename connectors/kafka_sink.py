"""Exactly-once Kafka sinks: two-phase (Kafka transactions) and idempotent (record ids).

Where the batch id is recorded
------------------------------
Both sinks record "sink S has written batch B" as committed offsets of a *sink-progress
consumer group* ``spark_ext.sink.<sink id>`` on the output topic
(:class:`~connectors.kafka_sink_progress.SinkProgress`).

Two-phase (:class:`KafkaTwoPhaseDataSource`, format ``spark_ext_kafka_2pc``)
---------------------------------------------------------------------------
A Kafka transaction cannot be opened by an executor task and committed later by the driver
(kafka-python cannot hand an open transaction to another process), and per-task
transactions (one per Spark partition, each also recording its own progress) would let a
``read_committed`` consumer see some partitions of a batch before the others. So:

1. ``staged`` -- each task writes its rows (``key``, ``value``, ``partition``) to an Arrow IPC
   file under ``staging_dir/<sink id>/b<batch>/``; the commit message names the file.
2. ``before_commit`` -- the driver's ``commit(messages, batchId)`` starts a transactional
   producer with ``transactional.id = spark_ext.<sink id>.<topic>.commit`` and calls
   ``init_transactions``: this fences a zombie driver and completes or aborts whatever
   transaction a killed driver left open. Only then it reads the recorded batch; a batch not
   above it is a replay and is skipped.
3. ``committed`` -- ONE transaction: every staged record, plus the progress offset
   (``send_offsets_to_transaction``) holding the batch id. ``read_committed`` consumers see
   the whole batch or none of it. If ``commit_transaction`` fails with its outcome unknown
   (the answer was lost), a fresh producer with the same id is initialised (which settles
   the transaction) and the recorded batch read again: recorded means committed; not
   recorded means aborted, and the transaction is retried.
4. ``cleaned`` -- the batch's staging folder is deleted.

Cost: every record is written twice (staging file, then Kafka) and produced by ONE producer
on the driver, so throughput is bounded by a single kafka-python producer.
``staging_dir`` must be on a filesystem both the executors and the driver see (the same
requirement as a checkpoint location); the default is under the checkpoint.

Idempotent (:class:`KafkaIdempotentWriter`, for ``foreachBatch``)
----------------------------------------------------------------
In :mod:`connectors.kafka_sink_idempotent` (records go from the tasks straight to the topic,
named by their input coordinates); re-exported here. The progress register is in
:mod:`connectors.kafka_sink_progress`.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import time
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.ipc as ipc
from pyspark.sql.datasource import (
    DataSource,
    DataSourceStreamArrowWriter,
    DataSourceStreamWriter,
    WriterCommitMessage,
)
from pyspark.sql.types import StructType

from connectors.kafka_sink_delivery import DeliveryCheck
from connectors.kafka_sink_errors import (
    PartitionOutOfRangeError,
    ProduceFailedError,
    TopicMissingError,
    TransactionExpiredError,
)
from connectors.kafka_sink_idempotent import (
    KafkaIdempotentWriter,
    OutputRegion,
    SliceWriter,
    partition_identity,
    record_id,
    written_ids,
)
from connectors.kafka_sink_progress import Recorded, SinkProgress
from connectors.kafka_sink_records import (
    LINGER_MS,
    PRODUCER,
    RECORD_ID_HEADER,
    check_columns,
    current_batch_id,
    task_attempt,
    to_bytes,
)
from spark_ext.crash import declare
from spark_ext.sinks.errors import (
    CommitUncertainError,
    DriverFencedError,
    SinkConfigError,
    StagedDataMissingError,
    TransactionTimeoutError,
    WriterFencedError,
)
from spark_ext.sinks.protocol import (
    KAFKA_TWO_PHASE,
    Protocol,
    TwoPhaseCommitter,
    abort_batch,
    commit_batch,
    validate_sink_id,
)

log = logging.getLogger(__name__)

__all__ = [
    "FORMAT",
    "PRODUCER",
    "RECORD_ID_HEADER",
    "KafkaCommitter",
    "KafkaIdempotentWriter",
    "KafkaSinkSettings",
    "KafkaStagingWriter",
    "KafkaTwoPhaseDataSource",
    "OutputRegion",
    "Recorded",
    "SinkProgress",
    "SliceWriter",
    "StagedRecords",
    "check_columns",
    "partition_identity",
    "record_id",
    "written_ids",
]

FORMAT = "spark_ext_kafka_2pc"
#: Inside step 3: every record of the batch is flushed into the open transaction, which is
#: neither recorded nor committed yet (``sleep`` here pushes the transaction past its timeout).
IN_TRANSACTION = declare(
    "kafka2pc.in_transaction", "driver", "records flushed into the open transaction, not committed"
)


# -- two-phase: step 1, staging on executors ----------------------------------------------
@dataclass(frozen=True)
class StagedRecords(WriterCommitMessage):
    """Commit message of one task: the Arrow file holding its records."""

    path: str
    rows: int
    batch_id: int
    partition: int


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


def staged_records(path: str) -> Iterator[tuple[bytes | None, bytes | None, int | None]]:
    """``(key, value, partition)`` of every record in a staged Arrow file."""
    if not os.path.exists(path):
        raise StagedDataMissingError(f"staged records {path} are gone")
    with pa.memory_map(path) as source:
        reader = ipc.open_file(source)
        for i in range(reader.num_record_batches):
            batch = reader.get_batch(i)
            names = batch.schema.names
            values = batch.column("value").to_pylist()
            keys = batch.column("key").to_pylist() if "key" in names else [None] * len(values)
            parts = (
                batch.column("partition").to_pylist()
                if "partition" in names
                else [None] * len(values)
            )
            for k, v, p in zip(keys, values, parts, strict=True):
                yield to_bytes(k), to_bytes(v), p


@dataclass(frozen=True)
class KafkaSinkSettings:
    """Typed options of the two-phase Kafka sink (validated when the query is built)."""

    bootstrap: str
    topic: str
    sink_id: str
    staging_dir: str
    transaction_timeout_ms: int = 300_000
    #: How long a record may wait for its acknowledgement (kafka-python ``delivery_timeout_ms``).
    delivery_timeout_ms: int = 120_000
    #: The run epoch of this start of the query (:meth:`KafkaCommitter.recover` with
    #: ``fence=True``); ``None``: no run-epoch check (commits made outside a query).
    run_epoch: int | None = None
    #: Transactions retried after one whose outcome was learned to be "aborted".
    max_attempts: int = 3

    def __post_init__(self) -> None:
        validate_sink_id(self.sink_id)
        if not self.topic:
            raise SinkConfigError("topic", "the output topic is required")
        if not self.staging_dir:
            raise SinkConfigError("staging_dir", "a staging folder is required")
        if self.transaction_timeout_ms < 1000:
            raise SinkConfigError("transaction_timeout_ms", "must be at least 1000")
        if self.delivery_timeout_ms < 1000:
            raise SinkConfigError("delivery_timeout_ms", "must be at least 1000")

    def producer_config(self) -> dict[str, Any]:
        """kafka-python settings of the transactional producer."""
        request_timeout = min(30_000, self.delivery_timeout_ms - LINGER_MS)
        return {
            **PRODUCER,
            "transactional_id": self.transactional_id,
            "transaction_timeout_ms": self.transaction_timeout_ms,
            "delivery_timeout_ms": self.delivery_timeout_ms,
            "request_timeout_ms": request_timeout,
        }

    @property
    def transactional_id(self) -> str:
        """``spark_ext.<sink id>.<topic>.commit``: the topic is part of it, so one sink id
        writing two topics does not fence itself (the FLINK-11654 pattern)."""
        return f"spark_ext.{self.sink_id}.{self.topic}.commit"

    def sink_dir(self) -> str:
        return os.path.join(self.staging_dir, self.sink_id)

    def batch_dir(self, batch_id: int) -> str:
        return os.path.join(self.sink_dir(), f"b{batch_id:012d}")

    def as_options(self) -> dict[str, str]:
        return {
            "bootstrap": self.bootstrap,
            "topic": self.topic,
            "sink_id": self.sink_id,
            "staging_dir": self.staging_dir,
            "transaction_timeout_ms": str(self.transaction_timeout_ms),
            "delivery_timeout_ms": str(self.delivery_timeout_ms),
            **({"run_epoch": str(self.run_epoch)} if self.run_epoch is not None else {}),
        }

    @classmethod
    def from_options(cls, options: Any) -> KafkaSinkSettings:
        timeouts = {}
        for name, default in (
            ("transaction_timeout_ms", 300_000),
            ("delivery_timeout_ms", 120_000),
        ):
            try:
                timeouts[name] = int(options.get(name, default))
            except ValueError as exc:
                raise SinkConfigError(name, "must be an integer") from exc
        epoch = options.get("run_epoch")
        return cls(
            bootstrap=options.get("bootstrap", ""),
            topic=options.get("topic", ""),
            sink_id=options.get("sink_id", ""),
            staging_dir=options.get("staging_dir", ""),
            run_epoch=int(epoch) if epoch is not None else None,
            **timeouts,
        )


# -- two-phase: steps 2-4 on the driver ---------------------------------------------------
def _fenced_errors() -> tuple[type[BaseException], ...]:
    from kafka.errors import InvalidProducerEpochError, ProducerFencedError

    return (ProducerFencedError, InvalidProducerEpochError)


#: kafka-python errors that mean "another producer with this transactional id took over".
FENCED = _fenced_errors()


def topic_partitions(producer: Any, topic: str) -> set[int]:
    """The partition ids of ``topic`` (from the producer's metadata)."""
    from kafka.errors import KafkaTimeoutError

    try:
        return set(producer.partitions_for(topic) or ())
    except KafkaTimeoutError as exc:
        raise TopicMissingError(topic, "output") from exc


def broker_max_transaction_timeout_ms(bootstrap: str) -> int:
    """The smallest ``transaction.max.timeout.ms`` of the cluster's brokers."""
    from kafka import KafkaAdminClient
    from kafka.admin import ConfigResource, ConfigResourceType

    key = "transaction.max.timeout.ms"
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        brokers = [str(b["broker_id"]) for b in admin.describe_cluster()["brokers"]]
        got = admin.describe_configs(
            [ConfigResource(ConfigResourceType.BROKER, b, configs={key: None}) for b in brokers],
            config_filter="all",
        )
    finally:
        admin.close()
    return min(int(cfg[key]["value"]) for cfg in got["broker"].values())


class KafkaCommitter(TwoPhaseCommitter[StagedRecords]):
    """Driver side of the two-phase Kafka sink: one transaction per batch."""

    protocol: Protocol = KAFKA_TWO_PHASE

    def __init__(self, settings: KafkaSinkSettings) -> None:
        self.settings = settings
        self.sink_id = settings.sink_id
        self.progress = SinkProgress(settings.bootstrap, settings.topic, settings.sink_id)
        #: The group whose committed offset on partition 0 is the latest run epoch.
        self.run_group = f"spark_ext.sink.{settings.sink_id}.run"
        self._producer: Any = None

    def producer(self) -> Any:
        """The transactional producer, initialised: zombies fenced, old transaction settled.

        A driver whose run epoch is older than the recorded one is refused *before*
        ``init_transactions`` (:class:`DriverFencedError`), so an old driver still running
        never fences the live one's transaction.
        """
        if self._producer is None:
            from kafka import KafkaProducer

            self._check_run_epoch()
            s = self.settings
            producer = KafkaProducer(bootstrap_servers=s.bootstrap, **s.producer_config())
            # kafka-python reports a timeout above the broker's maximum as a plain KafkaError;
            # recover() checks the maximum first, so that case fails at start-up, typed.
            producer.init_transactions()
            self._producer = producer
        return self._producer

    def close(self) -> None:
        if self._producer is not None:
            self._producer.close(timeout=10)
            self._producer = None

    def last_committed_batch(self) -> int | None:
        self.producer()  # settle a transaction a killed driver left before reading
        recorded = self.progress.read()
        return recorded.batch_id if recorded else None

    def commit_staged(self, batch_id: int, messages: Sequence[StagedRecords]) -> None:
        """Step 3, retried where that is safe.

        * outcome unknown (a lost answer): settle with a fresh producer, read the recorded
          batch back, retry only if it was not recorded;
        * fenced while the transaction was younger than ``transaction_timeout_ms``: another
          driver took over, :class:`WriterFencedError`, never retried;
        * fenced after ``transaction_timeout_ms`` (K5): the broker aborted the expired
          transaction; retried once in a fresh one, then :class:`TransactionExpiredError`
          naming the setting.
        """
        from kafka.errors import KafkaError

        for m in messages:
            if not os.path.exists(m.path):
                raise StagedDataMissingError(
                    f"staged records {m.path} of batch {batch_id} are gone"
                )
        timeout_ms = self.settings.transaction_timeout_ms
        expired = 0
        for attempt in range(1, self.settings.max_attempts + 1):
            started = time.monotonic()
            try:
                rows = self._transaction(batch_id, messages)
                log.info("%s batch %d: committed %d records", self.sink_id, batch_id, rows)
                return
            except (*FENCED, WriterFencedError) as exc:
                elapsed_ms = int((time.monotonic() - started) * 1000)
                if elapsed_ms < timeout_ms:
                    raise WriterFencedError(
                        f"{self.settings.transactional_id} was fenced by a newer producer"
                    ) from exc
                expired += 1
                self.close()  # the next attempt initialises a fresh producer
                if expired > 1:
                    raise TransactionExpiredError(
                        self.sink_id, batch_id, elapsed_ms, timeout_ms
                    ) from exc
                log.warning(
                    "%s batch %d: transaction expired after %d ms (timeout %d ms); retrying",
                    self.sink_id,
                    batch_id,
                    elapsed_ms,
                    timeout_ms,
                )
            except KafkaError as exc:
                log.warning("%s batch %d: commit outcome unknown (%r)", self.sink_id, batch_id, exc)
                if self._learn_outcome(batch_id):
                    return
                log.warning("%s batch %d: aborted, retry %d", self.sink_id, batch_id, attempt)
        raise CommitUncertainError(f"batch {batch_id} not committed after {attempt} attempts")

    def _transaction(self, batch_id: int, messages: Sequence[StagedRecords]) -> int:
        """One transaction: every staged record, then the progress offset, then commit.

        Every produce future is checked after ``flush()`` and before anything is recorded
        (K1): kafka-python would commit a transaction whose records expired. A failed record
        or a row naming a partition the topic lacks aborts the transaction and raises.
        """
        producer = self.producer()
        topic = self.settings.topic
        partitions = topic_partitions(producer, topic)
        check = DeliveryCheck()
        producer.begin_transaction()
        rows = 0
        try:
            for m in messages:
                for key, value, partition in staged_records(m.path):
                    if partition is not None and partition not in partitions:
                        raise PartitionOutOfRangeError(topic, partition, partitions)
                    check.watch(producer.send(topic, key=key, value=value, partition=partition))
                    rows += 1
            producer.flush()
            check.raise_if_failed(self.sink_id, batch_id)
            IN_TRANSACTION.reached(batch_id)
        except (ProduceFailedError, PartitionOutOfRangeError) as exc:
            self._abort_open_transaction(batch_id)
            if isinstance(getattr(exc, "cause", None), FENCED):
                raise WriterFencedError(
                    f"{self.settings.transactional_id} was fenced by a newer producer"
                ) from exc
            raise
        producer.send_offsets_to_transaction(self.progress.offsets(batch_id), self.progress.group)
        producer.commit_transaction()
        return rows

    def _abort_open_transaction(self, batch_id: int) -> None:
        """Abort the open transaction; if even that fails, drop the producer (the next
        ``init_transactions`` with this transactional id aborts it)."""
        from kafka.errors import KafkaError

        try:
            self._producer.abort_transaction()
            log.warning("%s batch %d: transaction aborted", self.sink_id, batch_id)
        except KafkaError as exc:
            log.warning(
                "%s batch %d: abort failed (%r); producer dropped", self.sink_id, batch_id, exc
            )
            self.close()

    def _learn_outcome(self, batch_id: int) -> bool:
        """After a lost answer: settle the transaction with a fresh producer, then look."""
        from kafka.errors import KafkaError

        try:
            if self._producer is not None:
                self._producer.close(timeout=1)
        except KafkaError:
            pass
        self._producer = None
        try:
            last = self.last_committed_batch()
        except KafkaError as exc:
            raise CommitUncertainError(f"batch {batch_id}: outcome unknown: {exc!r}") from exc
        return last is not None and last >= batch_id

    def clean(self, batch_id: int, messages: Sequence[StagedRecords], committed: bool) -> None:
        shutil.rmtree(self.settings.batch_dir(batch_id), ignore_errors=True)

    def _run_epoch_offset(self) -> Any:
        from kafka import TopicPartition

        return TopicPartition(self.settings.topic, 0)

    def recorded_run_epoch(self) -> int | None:
        """The run epoch the latest start of this sink recorded (``None`` before any)."""
        from kafka import KafkaConsumer

        consumer = KafkaConsumer(
            bootstrap_servers=self.settings.bootstrap,
            group_id=self.run_group,
            enable_auto_commit=False,
            isolation_level="read_committed",
        )
        try:
            got = consumer.committed(self._run_epoch_offset(), metadata=True)
        finally:
            consumer.close()
        return None if got is None else int(got.offset)

    def _check_run_epoch(self) -> None:
        mine = self.settings.run_epoch
        if mine is None:
            return
        current = self.recorded_run_epoch()
        if current is not None and current != mine:
            raise DriverFencedError(self.settings.topic, self.sink_id, mine, current)

    def start_run(self) -> int:
        """Fence every older driver of this sink and record a new run epoch; returns it."""
        from kafka.structs import OffsetAndMetadata

        producer = self.producer()  # init_transactions: older producers fenced first
        epoch = (self.recorded_run_epoch() or 0) + 1
        meta = json.dumps({"sink": self.sink_id, "run": epoch})
        producer.begin_transaction()
        producer.send_offsets_to_transaction(
            {self._run_epoch_offset(): OffsetAndMetadata(epoch, meta, -1)}, self.run_group
        )
        producer.commit_transaction()
        log.info("%s: run epoch %d recorded", self.sink_id, epoch)
        return epoch

    def recover(self, fence: bool = False) -> int | None:
        """At start: fail fast on a bad transaction timeout, fence zombies, drop old staging.

        With ``fence``, a new run epoch is recorded first and returned: pass it to this
        start's committers (:attr:`KafkaSinkSettings.run_epoch`).
        """
        s = self.settings
        limit = broker_max_transaction_timeout_ms(s.bootstrap)
        if s.transaction_timeout_ms > limit:
            raise TransactionTimeoutError(
                "transaction_timeout_ms",
                f"{s.transaction_timeout_ms} is above the broker's transaction.max.timeout.ms "
                f"({limit}); the broker would refuse every transaction",
            )
        epoch = self.start_run() if fence else None
        self.producer()
        folder = self.settings.sink_dir()
        if os.path.isdir(folder) and os.listdir(folder):
            log.warning("%s: removing staged batches of an earlier run", self.sink_id)
            shutil.rmtree(folder, ignore_errors=True)
        return epoch


class KafkaTwoPhaseDataSource(DataSource):
    """Python data source ``spark_ext_kafka_2pc`` (options: :class:`KafkaSinkSettings`)."""

    @classmethod
    def name(cls) -> str:
        return FORMAT

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        check_columns(schema)
        return KafkaStagingWriter(KafkaSinkSettings.from_options(self.options), schema)
