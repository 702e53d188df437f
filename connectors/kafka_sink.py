"""Exactly-once Kafka sinks: two-phase (Kafka transactions) and idempotent (record ids).

Where the batch id is recorded
------------------------------
Both sinks record "sink S has written batch B" as a committed offset of a *sink-progress
consumer group* ``spark_ext.sink.<sink id>`` on partition 0 of the output topic, with
``{"sink": S, "batch": B, ...}`` as the offset's metadata (:class:`SinkProgress`). No consumer
ever joins that group; it is a small durable register the broker keeps.

Two-phase (:class:`KafkaTwoPhaseDataSource`, format ``spark_ext_kafka_2pc``)
---------------------------------------------------------------------------
A Kafka transaction cannot be opened by an executor task and committed later by the driver
(kafka-python cannot hand an open transaction to another process), and per-task
transactions (one per Spark partition, each also recording its own progress) would let a
``read_committed`` consumer see some partitions of a batch before the others. So:

1. ``staged`` -- each task writes its rows (``key``, ``value``, ``partition``) to an Arrow IPC
   file under ``staging_dir/<sink id>/b<batch>/``; the commit message names the file.
2. ``before_commit`` -- the driver's ``commit(messages, batchId)`` starts a transactional
   producer with ``transactional.id = spark_ext.<sink id>.commit`` and calls
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
Every record carries the header ``spark_ext.record_id`` = ``<sink>/<batch>/<slice>/<seq>``
(``slice`` names the task's part of the batch by a digest of its records -- not by the task
index, which Spark may change on a replay -- and ``seq`` is the row's position in it) and,
when the row has no key, that id as its key. After all records of batch B are acknowledged
the driver records B with the end offsets of every output partition. On a replay of B the
sink knows what is already there by reading the output topic from the offsets recorded
for B-1 and collecting the record ids of batch B it finds; those rows are not sent again.
Records are produced without transactions: a consumer may see a batch while it is written.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import uuid
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.ipc as ipc
from pyspark.sql import DataFrame
from pyspark.sql.datasource import (
    DataSource,
    DataSourceStreamArrowWriter,
    DataSourceStreamWriter,
    WriterCommitMessage,
)
from pyspark.sql.types import BinaryType, IntegerType, StringType, StructType

from connectors.kafka_sink_delivery import DeliveryCheck
from connectors.kafka_sink_errors import (
    PartitionOutOfRangeError,
    ProduceFailedError,
    TopicMissingError,
)
from spark_ext.sinks.errors import (
    CommitUncertainError,
    SinkConfigError,
    StagedDataMissingError,
    TransactionTimeoutError,
    WriterFencedError,
)
from spark_ext.sinks.protocol import (
    KAFKA_IDEMPOTENT,
    KAFKA_TWO_PHASE,
    Protocol,
    TwoPhaseCommitter,
    abort_batch,
    commit_batch,
    validate_sink_id,
)

log = logging.getLogger(__name__)
logging.getLogger("kafka").setLevel(logging.WARNING)

FORMAT = "spark_ext_kafka_2pc"
RECORD_ID_HEADER = "spark_ext.record_id"
BATCH_ID_PROPERTY = "streaming.sql.batchId"
#: Producer settings of both sinks (throughput without giving up ordering or acks).
PRODUCER = {"acks": "all", "linger_ms": 20, "batch_size": 512 * 1024, "enable_idempotence": True}


def check_columns(schema: StructType) -> None:
    """The rows a Kafka sink takes: ``value`` (string/binary), optional ``key``, ``partition``."""
    types = {f.name: f.dataType for f in schema.fields}
    if "value" not in types:
        raise SinkConfigError("df", "a Kafka sink needs a 'value' column")
    extra = sorted(set(types) - {"key", "value", "partition"})
    if extra:
        raise SinkConfigError("df", f"unexpected columns {extra}: only key, value, partition")
    for name in ("key", "value"):
        if name in types and not isinstance(types[name], (StringType, BinaryType)):
            raise SinkConfigError(f"df.{name}", f"must be string or binary, not {types[name]}")
    if "partition" in types and not isinstance(types["partition"], IntegerType):
        raise SinkConfigError("df.partition", f"must be int, not {types['partition']}")


def _bytes(value: Any) -> bytes | None:
    if value is None or isinstance(value, bytes):
        return value
    return str(value).encode()


def current_batch_id() -> int:
    from pyspark import TaskContext

    ctx = TaskContext.get()
    value = ctx.getLocalProperty(BATCH_ID_PROPERTY) if ctx else None
    if value is None:
        raise StagedDataMissingError(f"no {BATCH_ID_PROPERTY} local property: not a stream task")
    return int(value)


# -- the sink-progress register ----------------------------------------------------------
@dataclass(frozen=True)
class Recorded:
    """What the progress group holds: the last batch and (idempotent sink) end offsets."""

    batch_id: int
    end_offsets: dict[int, int]


class SinkProgress:
    """The batch id a sink last wrote, as a committed offset of group ``spark_ext.sink.<id>``.

    Read with ``isolation_level=read_committed`` (``require_stable``), so an offset committed
    by a transaction still being completed is waited for, never read half-way.
    """

    def __init__(self, bootstrap: str, topic: str, sink_id: str) -> None:
        self.bootstrap = bootstrap
        self.topic = topic
        self.sink_id = validate_sink_id(sink_id)
        self.group = f"spark_ext.sink.{sink_id}"

    def _consumer(self) -> Any:
        from kafka import KafkaConsumer

        return KafkaConsumer(
            bootstrap_servers=self.bootstrap,
            group_id=self.group,
            enable_auto_commit=False,
            isolation_level="read_committed",
        )

    def read(self) -> Recorded | None:
        from kafka import TopicPartition

        consumer = self._consumer()
        try:
            got = consumer.committed(TopicPartition(self.topic, 0), metadata=True)
        finally:
            consumer.close()
        if got is None or not got.metadata:
            return None
        meta = json.loads(got.metadata)
        if meta.get("sink") != self.sink_id:
            return None
        ends = {int(p): int(o) for p, o in meta.get("ends", {}).items()}
        return Recorded(int(meta["batch"]), ends)

    def offsets(self, batch_id: int, end_offsets: dict[int, int] | None = None) -> dict[Any, Any]:
        """The offsets that record ``batch_id``: partition 0 carries the metadata."""
        from kafka import TopicPartition
        from kafka.structs import OffsetAndMetadata

        ends = end_offsets or {}
        meta = json.dumps({"sink": self.sink_id, "batch": batch_id, "ends": ends})
        parts = sorted(set(ends) | {0})
        return {
            TopicPartition(self.topic, p): OffsetAndMetadata(ends.get(p, batch_id), meta, -1)
            for p in parts
        }

    def record(self, batch_id: int, end_offsets: dict[int, int]) -> None:
        """Record ``batch_id`` outside a transaction (the idempotent sink)."""
        consumer = self._consumer()
        try:
            consumer.commit(self.offsets(batch_id, end_offsets))
        finally:
            consumer.close()


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
        from pyspark import TaskContext
        from pyspark.sql.pandas.types import to_arrow_schema

        ctx = TaskContext.get()
        partition = ctx.partitionId() if ctx else 0
        attempt = ctx.attemptNumber() if ctx else 0
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
                yield _bytes(k), _bytes(v), p


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
        request_timeout = min(30_000, self.delivery_timeout_ms - PRODUCER["linger_ms"])
        return {
            **PRODUCER,
            "transactional_id": self.transactional_id,
            "transaction_timeout_ms": self.transaction_timeout_ms,
            "delivery_timeout_ms": self.delivery_timeout_ms,
            "request_timeout_ms": request_timeout,
        }

    @property
    def transactional_id(self) -> str:
        return f"spark_ext.{self.sink_id}.commit"

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
        return cls(
            bootstrap=options.get("bootstrap", ""),
            topic=options.get("topic", ""),
            sink_id=options.get("sink_id", ""),
            staging_dir=options.get("staging_dir", ""),
            **timeouts,
        )


# -- two-phase: steps 2-4 on the driver ---------------------------------------------------
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
        self._producer: Any = None

    def producer(self) -> Any:
        """The transactional producer, initialised: zombies fenced, old transaction settled."""
        if self._producer is None:
            from kafka import KafkaProducer

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
        from kafka.errors import KafkaError, ProducerFencedError

        for m in messages:
            if not os.path.exists(m.path):
                raise StagedDataMissingError(
                    f"staged records {m.path} of batch {batch_id} are gone"
                )
        for attempt in range(1, self.settings.max_attempts + 1):
            try:
                rows = self._transaction(batch_id, messages)
                log.info("%s batch %d: committed %d records", self.sink_id, batch_id, rows)
                return
            except ProducerFencedError as exc:
                raise WriterFencedError(
                    f"{self.settings.transactional_id} was fenced by a newer producer"
                ) from exc
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
        except (ProduceFailedError, PartitionOutOfRangeError):
            self._abort_open_transaction(batch_id)
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

    def recover(self) -> None:
        """At start: fail fast on a bad transaction timeout, fence zombies, drop old staging."""
        s = self.settings
        limit = broker_max_transaction_timeout_ms(s.bootstrap)
        if s.transaction_timeout_ms > limit:
            raise TransactionTimeoutError(
                "transaction_timeout_ms",
                f"{s.transaction_timeout_ms} is above the broker's transaction.max.timeout.ms "
                f"({limit}); the broker would refuse every transaction",
            )
        self.producer()
        folder = self.settings.sink_dir()
        if os.path.isdir(folder) and os.listdir(folder):
            log.warning("%s: removing staged batches of an earlier run", self.sink_id)
            shutil.rmtree(folder, ignore_errors=True)


class KafkaTwoPhaseDataSource(DataSource):
    """Python data source ``spark_ext_kafka_2pc`` (options: :class:`KafkaSinkSettings`)."""

    @classmethod
    def name(cls) -> str:
        return FORMAT

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        check_columns(schema)
        return KafkaStagingWriter(KafkaSinkSettings.from_options(self.options), schema)


# -- idempotent, foreachBatch -------------------------------------------------------------
def record_id(sink_id: str, batch_id: int, partition: str, seq: int) -> str:
    return f"{sink_id}/{batch_id}/{partition}/{seq}"


def partition_identity(records: Sequence[tuple[bytes | None, bytes | None, int | None]]) -> str:
    """A name for a task's slice of a batch that does not depend on the task's index.

    Spark does not promise that a batch re-run after a restart gives the same slice of input
    to the same task index (the offset log is re-read, and the Kafka source plans its ranges
    from it anew); record ids built from the task index duplicated rows in the crash test.
    The digest of the slice's records does not move: a replayed batch has the same slices
    with the same records in the same order (DESIGN.md invariant 2). Two slices of one batch
    with identical records would share a name; their ids would then collide on a replay.
    """
    digest = hashlib.blake2b(digest_size=8)
    for key, value, part in records:
        for field in (key, value):
            digest.update(
                len(field).to_bytes(4, "big") + field if field is not None else b"\xff" * 4
            )
        digest.update(str(part).encode())
    return digest.hexdigest()


def end_offsets(bootstrap: str, topic: str) -> dict[int, int]:
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(bootstrap_servers=bootstrap, isolation_level="read_committed")
    try:
        parts = [
            TopicPartition(topic, p) for p in sorted(consumer.partitions_for_topic(topic) or [])
        ]
        return {tp.partition: off for tp, off in consumer.end_offsets(parts).items()}
    finally:
        consumer.close()


def written_ids(
    bootstrap: str, topic: str, since: dict[int, int], prefix: str, timeout_s: float = 30.0
) -> set[str]:
    """Record ids starting with ``prefix`` in ``topic`` after offsets ``since`` (per partition)."""
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(
        bootstrap_servers=bootstrap,
        enable_auto_commit=False,
        consumer_timeout_ms=int(timeout_s * 1000),
    )
    found: set[str] = set()
    try:
        parts = [
            TopicPartition(topic, p) for p in sorted(consumer.partitions_for_topic(topic) or [])
        ]
        consumer.assign(parts)
        ends = consumer.end_offsets(parts)
        for tp in parts:
            consumer.seek(tp, since.get(tp.partition, 0))
        while any(consumer.position(tp) < ends[tp] for tp in parts):
            polled = consumer.poll(timeout_ms=1000)
            for records in polled.values():
                for r in records:
                    for name, value in r.headers or ():
                        if name == RECORD_ID_HEADER and value.decode().startswith(prefix):
                            found.add(value.decode())
    finally:
        consumer.close()
    return found


@dataclass(frozen=True)
class _PartitionWriter:
    """What each task of an idempotent batch runs (pickled to the executors)."""

    bootstrap: str
    topic: str
    sink_id: str
    batch_id: int
    skip: frozenset[str]

    def __call__(self, rows: Iterable[Any]) -> None:
        from kafka import KafkaProducer

        records = []
        for row in rows:
            d = row.asDict()
            records.append((_bytes(d.get("key")), _bytes(d["value"]), d.get("partition")))
        slice_id = partition_identity(records)
        producer = KafkaProducer(bootstrap_servers=self.bootstrap, **PRODUCER)
        try:
            half = len(records) // 2
            for seq, (key, value, part) in enumerate(records):
                if seq == half and half:
                    producer.flush()
                    # 2. partial: half of this partition is in the topic, half is not.
                    KAFKA_IDEMPOTENT.reached(2, self.batch_id)
                rid = record_id(self.sink_id, self.batch_id, slice_id, seq)
                if rid in self.skip:
                    continue
                producer.send(
                    self.topic,
                    key=key if key is not None else rid.encode(),
                    value=value,
                    partition=part,
                    headers=[(RECORD_ID_HEADER, rid.encode())],
                )
            producer.flush()
        finally:
            producer.close(timeout=10)


class KafkaIdempotentWriter:
    """``foreachBatch`` function writing each record once, recognised by its record id.

    Parameters
    ----------
    bootstrap, topic
        The output topic (it exists).
    sink_id
        Names the progress group and prefixes every record id; keep it across restarts.
    """

    protocol: Protocol = KAFKA_IDEMPOTENT

    def __init__(self, bootstrap: str, topic: str, sink_id: str) -> None:
        self.bootstrap = bootstrap
        self.topic = topic
        self.sink_id = validate_sink_id(sink_id)
        self.progress = SinkProgress(bootstrap, topic, sink_id)

    def __call__(self, df: DataFrame, batch_id: int) -> None:
        check_columns(df.schema)
        recorded = self.progress.read()
        if recorded is not None and recorded.batch_id >= batch_id:
            log.info("%s batch %d: already written, replay skipped", self.sink_id, batch_id)
            return
        since = recorded.end_offsets if recorded else {}
        skip = written_ids(self.bootstrap, self.topic, since, f"{self.sink_id}/{batch_id}/")
        if skip:
            log.warning(
                "%s batch %d: %d records already written", self.sink_id, batch_id, len(skip)
            )
        # 1. before_write: the batch is known, what it already wrote is known.
        self.protocol.reached(1, batch_id)
        write = _PartitionWriter(
            self.bootstrap, self.topic, self.sink_id, batch_id, frozenset(skip)
        )
        df.foreachPartition(write)
        # 3. written: every record of the batch is acknowledged by the broker.
        self.protocol.reached(3, batch_id)
        self.progress.record(batch_id, end_offsets(self.bootstrap, self.topic))
        # 4. marked: the batch id is recorded; Spark's commit log comes next.
        self.protocol.reached(4, batch_id)
