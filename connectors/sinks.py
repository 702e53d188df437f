"""One call per exactly-once sink (Delta, Kafka): start a streaming query that writes a DataFrame
exactly once across driver crashes and restarts from the same checkpoint and sink id, if the query
is deterministic (guarantees and caveats: docs/design.md, "Delta sinks" and "Kafka sinks").

>>> q = exactly_once_to_delta(df, "/data/events", sink_id="events", checkpoint="/chk/events",
...                           trigger=Trigger(available_now=True))  # doctest: +SKIP
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Literal

from pyspark.sql import DataFrame
from pyspark.sql.streaming import DataStreamWriter, StreamingQuery

from spark_ext import kafka_clients
from spark_ext.sinks.errors import SinkConfigError
from spark_ext.sinks.owner import SinkOwner, owner_of_checkpoint
from spark_ext.sinks.trigger import DEFAULT_TRIGGER, Trigger, check_sink_query
from spark_ext.storage import Location, StorageSettings, session_settings

log = logging.getLogger(__name__)

__all__ = ["Trigger", "exactly_once_to_delta", "exactly_once_to_kafka"]

DeltaMode = Literal["two_phase", "idempotent"]
KafkaMode = DeltaMode


def _start(
    df: DataFrame,
    checkpoint: str | Path,
    sink_id: str,
    mode: str,
    trigger: Trigger,
    check: Callable[[], None] = lambda: None,
) -> tuple[DataStreamWriter, SinkOwner]:
    """The query's writer (checkpoint, named ``sink_id``, trigger, append) and its owner, after the checks
    (``check``: the sink's own, before a new checkpoint's metadata is written)."""
    chk = check_sink_query(df, checkpoint, sink_id)
    if mode not in ("two_phase", "idempotent"):
        raise SinkConfigError("mode", f"{mode!r} is not 'two_phase' or 'idempotent'")
    check()
    writer = df.writeStream.option("checkpointLocation", chk).queryName(sink_id)
    # the owner is the query id Spark will run this checkpoint with
    return trigger.apply(writer.outputMode("append")), owner_of_checkpoint(chk)


def exactly_once_to_delta(
    df: DataFrame,
    path: str | Path,
    *,
    sink_id: str,
    checkpoint: str | Path,
    mode: DeltaMode = "two_phase",
    trigger: Trigger = DEFAULT_TRIGGER,
    take_over: bool = False,
    storage: StorageSettings | None = None,
) -> StreamingQuery:
    """Append a streaming DataFrame to the Delta table at ``path`` (created with ``df``'s schema
    if missing), one Delta version per batch.

    ``sink_id`` names the sink for good (the table's ``txn.appId``); ``mode``: ``"two_phase"``
    (tasks stage Parquet, the driver makes one delta-rs commit per batch) or ``"idempotent"``
    (Spark's Delta writer in ``foreachBatch`` with ``txnAppId``); ``take_over``: hand
    ``sink_id`` over from the query that owns it (else ``SinkOwnerError``), batch ids restart
    at 0; ``storage``: of a table on object storage (default: the
    session's, i.e. the profile's ``[storage]``; docs/design.md, "Object storage"). Refusals (``SchemaMismatchError``, ``UnsupportedTableFeatureError``,
    ``DeltaTxnExpiredError``, ``DeltaTargetPathError``) and fencing: docs/design.md, "Delta sinks".
    """
    from connectors.delta.idempotent import DeltaIdempotentWriter
    from connectors.delta.table import ensure_table
    from connectors.delta.two_phase import (
        FORMAT,
        DeltaCommitter,
        DeltaTwoPhaseDataSource,
        storage_options,
    )

    table = str(path)
    if storage is None and Location.parse(table).is_s3:
        storage = session_settings(df.sparkSession)  # the profile's [storage], as built
    writer, owner = _start(df, checkpoint, sink_id, mode, trigger)
    if mode == "two_phase":
        ensure_table(table, df.schema, storage)
        committer = DeltaCommitter(
            table, sink_id, owner=owner, take_over=take_over, settings=storage
        )
        committer.recover(fence=True)
        df.sparkSession.dataSource.register(DeltaTwoPhaseDataSource)
        query = (
            writer.format(FORMAT)
            .option("sink_id", sink_id)
            .option("run_epoch", str(committer.run_epoch))
            .option("owner", owner.query_id)
            .options(**storage_options(storage))
            .start(table)
        )
    else:
        idempotent = DeltaIdempotentWriter(
            table, sink_id, owner=owner, take_over=take_over, settings=storage
        )
        idempotent.claim(df)  # refuses a stranger (or takes over) before the query starts
        query = writer.foreachBatch(idempotent).start()
    log.info("exactly-once Delta sink %s (%s) -> %s started", sink_id, mode, table)
    return query


def exactly_once_to_kafka(
    df: DataFrame,
    topic: str,
    *,
    bootstrap: str,
    sink_id: str,
    checkpoint: str | Path,
    mode: KafkaMode = "two_phase",
    trigger: Trigger = DEFAULT_TRIGGER,
    transaction_timeout_ms: int = 300_000,
    delivery_timeout_ms: int = 120_000,
    take_over: bool = False,
    kafka_properties: Mapping[str, str] | None = None,
) -> StreamingQuery:
    """Write a streaming DataFrame to the existing ``topic`` (else ``TopicMissingError``).

    ``df`` has ``value`` (string or binary), ``record_id`` (string: the row's input
    coordinates, unique within a batch and the same on a replay), optional ``key`` and
    ``partition`` (int). ``sink_id`` names the sink's groups and transactional ids for good
    (:mod:`connectors.kafka.names`). ``mode``: ``"two_phase"`` (a transaction per task slice;
    ``read_committed`` consumers see each record once) or ``"idempotent"`` (tasks produce
    directly, a replay re-sends only records not in the topic; ``spark.speculation`` refused).
    ``transaction_timeout_ms`` (two-phase) must not exceed the broker's
    ``transaction.max.timeout.ms``; ``delivery_timeout_ms`` (at least 1000) bounds a record's
    acknowledgement and a stalled client call. ``take_over`` as for :func:`exactly_once_to_delta`.
    ``kafka_properties`` (Kafka's names: ``security.protocol``, ``sasl.*``, ``ssl.*``) are given
    to every client of ``bootstrap`` (:func:`spark_ext.kafka_clients.configure`; default: those
    configured already, e.g. by the profile's ``[kafka.properties]``).
    Caveats (aborted records for ``read_uncommitted`` readers, offset retention):
    docs/design.md, "Kafka sinks".
    """
    from connectors.kafka.idempotent import KafkaIdempotentWriter, check_no_speculation
    from connectors.kafka.records import check_columns, require_topic

    if kafka_properties is not None:
        kafka_clients.configure(bootstrap, kafka_properties)

    def check() -> None:
        check_columns(df.schema, require_record_id=True)
        if mode == "idempotent":
            check_no_speculation(df)
        require_topic(bootstrap, topic)

    writer, owner = _start(df, checkpoint, sink_id, mode, trigger, check)
    if mode == "two_phase":
        from connectors.kafka.settings import KafkaSinkSettings
        from connectors.kafka.slices import FORMAT, KafkaSlicedDataSource, recover_slices

        base = KafkaSinkSettings(
            bootstrap,
            topic,
            sink_id,
            transaction_timeout_ms,
            delivery_timeout_ms,
            owner=owner.query_id,
        )
        settings = recover_slices(base, take_over=take_over)
        df.sparkSession.dataSource.register(KafkaSlicedDataSource)
        query = writer.format(FORMAT).options(**settings.as_options()).start()
    else:
        idempotent = KafkaIdempotentWriter(
            bootstrap, topic, sink_id, owner, take_over, delivery_timeout_ms
        )
        idempotent.claim(owner)  # at start: another owner is refused before the query runs
        query = writer.foreachBatch(idempotent).start()
    log.info("exactly-once Kafka sink %s (%s) -> %s started", sink_id, mode, topic)
    return query
