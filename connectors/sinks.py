"""One call per exactly-once sink (Delta, Kafka): start a streaming query that writes a DataFrame exactly once.

Guaranteed: after any number of driver crashes and restarts from the same ``checkpoint`` with
the same ``sink_id``, the target holds every row of every batch once, if the query is
deterministic (docs/design.md, invariant 2). Not guaranteed: row order across tasks; exactly
once across a changed ``sink_id`` or ``checkpoint``; updates or deletes (all sinks append).

Example
-------
>>> from connectors.sinks import Trigger, exactly_once_to_delta
>>> q = exactly_once_to_delta(df, "/data/events", sink_id="events",
...                           checkpoint="/chk/events", trigger=Trigger(available_now=True))  # doctest: +SKIP
>>> q.awaitTermination()  # doctest: +SKIP
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Literal

from pyspark.sql import DataFrame
from pyspark.sql.streaming import StreamingQuery

from spark_ext.sinks.errors import SinkConfigError
from spark_ext.sinks.trigger import DEFAULT_TRIGGER, Trigger, check_sink_query

log = logging.getLogger(__name__)

__all__ = ["Trigger", "exactly_once_to_delta", "exactly_once_to_kafka"]

DeltaMode = Literal["two_phase", "idempotent"]
KafkaMode = Literal["two_phase", "idempotent"]


def exactly_once_to_delta(
    df: DataFrame,
    path: str | Path,
    *,
    sink_id: str,
    checkpoint: str | Path,
    mode: DeltaMode = "two_phase",
    trigger: Trigger = DEFAULT_TRIGGER,
    query_name: str | None = None,
    take_over: bool = False,
) -> StreamingQuery:
    """Append a streaming DataFrame to the Delta table at ``path``, exactly once.

    Parameters
    ----------
    df
        A streaming DataFrame whose batches are deterministic.
    path
        The Delta table folder (local or mounted). Created with ``df``'s schema if missing.
    sink_id
        Names this sink for good (the table's ``txn.appId``); keep it across restarts, one per
        query writing the table.
    checkpoint
        Spark's checkpoint location of the query.
    mode
        ``"two_phase"``: tasks stage Parquet, the driver makes one delta-rs commit per batch.
        ``"idempotent"``: Spark's Delta writer in ``foreachBatch`` with ``txnAppId``.
    trigger
        When batches run; default every second.
    take_over
        Hand ``sink_id`` over from the query that owns it (else refused): batch ids restart at
        0 and the old owner is refused.

    Returns
    -------
    StreamingQuery
        The started query.

    Raises
    ------
    SinkOwnerError
        Another query (checkpoint) owns ``sink_id`` and ``take_over`` is false.
    SchemaMismatchError
        The table exists with another schema.
    SinkConfigError
        A bad ``sink_id``, ``mode`` or a batch DataFrame.
    UnsupportedTableFeatureError
        (two-phase) A table feature delta-rs cannot honour (``feature`` names it); use
        ``mode="idempotent"``.
    DeltaTxnExpiredError
        (two-phase) Files of this sink but no ``txn`` (expired): nothing written or deleted.
    DeltaTargetPathError
        ``path`` is a file, or a folder of other files without a Delta log.

    Notes
    -----
    Each batch is ONE Delta version (both modes): readers never see part of a batch. Two-phase:
    each start adds one version (fencing older drivers: ``DriverFencedError``); files a late
    task attempt stages after its batch committed stay, unreferenced, until the next start.
    """
    from connectors.delta.two_phase import (
        FORMAT,
        DeltaCommitter,
        DeltaIdempotentWriter,
        DeltaTwoPhaseDataSource,
        ensure_table,
    )
    from spark_ext.sinks.owner import owner_of_checkpoint

    chk = check_sink_query(df, checkpoint, sink_id)
    table = str(path)
    writer = df.writeStream.option("checkpointLocation", chk).queryName(query_name or sink_id)
    writer = trigger.apply(writer.outputMode("append"))
    if mode not in ("two_phase", "idempotent"):
        raise SinkConfigError("mode", f"{mode!r} is not 'two_phase' or 'idempotent'")
    owner = owner_of_checkpoint(chk)  # the query id Spark will run this checkpoint with
    if mode == "two_phase":
        ensure_table(table, df.schema)
        committer = DeltaCommitter(table, sink_id, owner=owner, take_over=take_over)
        committer.recover(fence=True)
        df.sparkSession.dataSource.register(DeltaTwoPhaseDataSource)
        query = (
            writer.format(FORMAT)
            .option("sink_id", sink_id)
            .option("run_epoch", str(committer.run_epoch))
            .option("owner", owner.query_id)
            .start(table)
        )
    else:
        idempotent = DeltaIdempotentWriter(table, sink_id, owner=owner, take_over=take_over)
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
    query_name: str | None = None,
    take_over: bool = False,
) -> StreamingQuery:
    """Write a streaming DataFrame of ``value`` (+ optional ``key``, ``partition``) to ``topic``.

    Parameters
    ----------
    df
        Columns ``value`` (string or binary), ``record_id`` (string: the row's input
        coordinates, unique within a batch and the same on a replay), optional ``key``
        (string or binary) and ``partition`` (int).
    topic
        The output topic; it must exist (else ``TopicMissingError``).
    bootstrap
        Kafka bootstrap servers.
    sink_id
        Names this sink for good (its groups and transactional ids:
        :mod:`connectors.kafka.names`).
    checkpoint
        Spark's checkpoint location.
    mode
        ``"two_phase"``: each task produces its slice in its own transaction; ``read_committed``
        consumers see each record once (:mod:`connectors.kafka.slices`). ``"idempotent"``:
        tasks produce directly and a replay re-sends only records not in the topic; any
        consumer sees each record once (``spark.speculation`` refused).
    transaction_timeout_ms
        (two-phase) At most the broker's ``transaction.max.timeout.ms`` (else
        ``TransactionTimeoutError``); a slice that outlives it is ``TransactionExpiredError``
        and retried. Bound batches with ``maxOffsetsPerTrigger``.
    delivery_timeout_ms
        How long a record may wait for its acknowledgement (at least 1000; else
        ``ProduceFailedError``); also bounds a stalled client call (``ClientStalledError``)
        and, idempotent, a retried task's wait for a lost attempt.
    take_over
        Hand ``sink_id`` over from the query that owns it (else ``SinkOwnerError``): batch ids
        restart at 0 and the old owner is refused.

    Notes
    -----
    Not guaranteed: ``read_uncommitted`` consumers of the two-phase sink see aborted records;
    the progress group's offsets expire after the broker's ``offsets.retention.minutes``
    without commits (7 days by default), after which a replay of the last batch is no longer
    recognised. Write failures are typed (``spark_ext.sinks.errors``).
    """
    from connectors.kafka.idempotent import KafkaIdempotentWriter, check_no_speculation
    from connectors.kafka.records import check_columns, require_topic
    from spark_ext.sinks.owner import owner_of_checkpoint

    chk = check_sink_query(df, checkpoint, sink_id)
    check_columns(df.schema, require_record_id=True)
    if mode == "idempotent":
        check_no_speculation(df)
    require_topic(bootstrap, topic)
    owner = owner_of_checkpoint(chk)  # the query id Spark will run this checkpoint with
    writer = df.writeStream.option("checkpointLocation", chk).queryName(query_name or sink_id)
    writer = trigger.apply(writer.outputMode("append"))
    if mode == "two_phase":
        from connectors.kafka.sliced_writer import slice_settings
        from connectors.kafka.slices import FORMAT, KafkaSlicedDataSource, recover_slices

        settings = slice_settings(
            bootstrap, topic, sink_id, transaction_timeout_ms, delivery_timeout_ms, owner
        )
        settings = recover_slices(settings, take_over=take_over)
        df.sparkSession.dataSource.register(KafkaSlicedDataSource)
        query = writer.format(FORMAT).options(**settings.as_options()).start()
    elif mode == "idempotent":
        idempotent = KafkaIdempotentWriter(
            bootstrap, topic, sink_id, owner, take_over, delivery_timeout_ms
        )
        idempotent.claim(owner)  # at start: another owner is refused before the query runs
        query = writer.foreachBatch(idempotent).start()
    else:
        raise SinkConfigError("mode", f"{mode!r} is not 'two_phase' or 'idempotent'")
    log.info("exactly-once Kafka sink %s (%s) -> %s started", sink_id, mode, topic)
    return query
