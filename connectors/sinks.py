"""One call per exactly-once sink (Delta, Kafka): start a streaming query that writes a DataFrame exactly once.

What is guaranteed (for every sink here): after any number of driver crashes and restarts
from the same ``checkpoint`` with the same ``sink_id``, the target holds every row of every
micro-batch Spark processed exactly once -- provided the query is deterministic (a replayed
batch computes the same rows, docs/design.md invariant 2) and only one query writes with a given
``sink_id`` at a time.

What is not guaranteed: order of rows across tasks; exactly-once if ``sink_id`` or
``checkpoint`` changes between runs (a new sink id is a new sink); updates or deletes (all
sinks append); visibility timing (two-phase sinks show a batch only when the driver commits).

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
        Names this sink for good: recorded in the table as ``txn.appId`` with the batch id as
        ``txn.version``. Keep it across restarts; give every query writing the table its own.
    checkpoint
        Spark's checkpoint location of the query.
    mode
        ``"two_phase"``: tasks stage Parquet files, the driver makes one Delta commit per batch
        with every file and the ``txn`` (written by delta-rs). ``"idempotent"``: Spark's Delta
        writer in ``foreachBatch`` with ``txnAppId``/``txnVersion``.
    trigger
        When batches run; default every second.
    take_over
        The table records which query owns ``sink_id`` (the query id kept in ``checkpoint``);
        another query is refused. ``True`` hands the sink over to this query on purpose: its
        batch ids start again at 0 and the old owner's next batch is refused.

    Returns
    -------
    StreamingQuery
        The started query.

    Raises
    ------
    SinkOwnerError
        Another query (another checkpoint, or this one reset) owns ``sink_id`` on this table
        and ``take_over`` is false; nothing is written.
    SchemaMismatchError
        The table exists with another schema (raised here, before any batch runs).
    SinkConfigError
        A bad ``sink_id``, ``mode`` or a batch DataFrame.
    UnsupportedTableFeatureError
        (two-phase) The table is partitioned, has a NOT NULL column the rows may break, CHECK
        constraints, generated or identity columns, column mapping or row tracking; ``feature``
        names it. Use ``mode="idempotent"`` for such a table.
    DeltaTxnExpiredError
        (two-phase) The table holds files of this sink but no ``txn`` for it (expired by
        ``delta.setTransactionRetentionDuration``): nothing is written or deleted.
    DeltaTargetPathError
        ``path`` is a file, or a folder of other files without a Delta log.

    Notes
    -----
    Guaranteed: each batch is in the table exactly once, as ONE Delta version (in both
    modes), so readers of the table (Spark's Delta reader, ``deltalake``) never see part of a
    batch; no file a loadable snapshot references is ever deleted by the sink. Two-phase: each
    start adds one Delta version (the run epoch that fences an older driver of this sink still
    running: its commits fail with ``DriverFencedError``) and removes staged files no snapshot
    references. Not guaranteed: files staged by a late task attempt after its batch committed
    stay in the folder, unreferenced, until the next start.
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
        # refuses a stranger, then fences older drivers (recording the owner), removes orphans
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
        A streaming DataFrame with a ``value`` column (string or binary), a ``record_id``
        column (string: the row's input coordinates, unique within a batch and the same when
        the batch is re-run) and optionally ``key`` (string or binary) and ``partition``
        (int), like Spark's Kafka sink takes.
    topic
        The output topic; it must exist (:class:`~spark_ext.sinks.errors.TopicMissingError`
        otherwise, raised here).
    bootstrap
        Kafka bootstrap servers.
    sink_id
        Names this sink for good: the progress consumer group ``spark_ext.sink:<sink_id>``
        records the last batch written; the tasks' transactional ids are
        ``spark_ext.tx:<sink_id>:<topic>:s<task>``; every name is in
        :mod:`connectors.kafka.names`.
    checkpoint
        Spark's checkpoint location.
    mode
        ``"two_phase"``: every task produces its records straight to the topic in its own
        Kafka transaction, committed with a record of the slice; nothing passes the driver
        (:mod:`connectors.kafka.slices`). ``read_committed`` consumers see a batch task by
        task, each record once. ``"idempotent"``: tasks produce directly, every record
        carries a ``spark_ext.record_id`` header; a replayed batch re-sends only records not
        already in the topic.
    transaction_timeout_ms
        (two-phase) Must not exceed the broker's ``transaction.max.timeout.ms``; checked here
        (:class:`TransactionTimeoutError`). A transaction that outlives it (one task's slice)
        fails with ``TransactionExpiredError`` naming this setting; Spark retries a failed task. Bound
        batches with ``maxOffsetsPerTrigger`` so the largest one commits well within it.
    delivery_timeout_ms
        How long a record may wait for its acknowledgement (at least 1000). Two-phase: a
        record not acknowledged in time fails its slice with ``ProduceFailedError``
        and nothing of it is committed. It also sets how long the sink waits on a client call
        that stalls (``ClientStalledError``, e.g. after the group coordinator restarted).
        Idempotent: how long a task retried after its executor was lost waits before it
        reads back what the lost attempt, maybe still running, sent.
    take_over
        The sink is owned by the query whose ``checkpoint`` first wrote with ``sink_id``
        (Spark's query id, kept in the checkpoint and recorded next to the sink's batch). Another
        query (a new or reset checkpoint) is refused at start with ``SinkOwnerError``, nothing
        written; ``take_over=True`` hands the sink over to this query on purpose: its batch
        ids start again at 0, and the old owner is refused from then on.

    Notes
    -----
    Guaranteed: each row of each batch is in the topic once -- for ``read_committed``
    consumers in two-phase mode, for any consumer in idempotent mode -- also when a task is
    retried or runs speculatively (two-phase). Not guaranteed:
    ``read_uncommitted`` consumers of the two-phase sink see records of aborted transactions;
    idempotent-mode consumers may see a batch while it is being written; the progress group's
    offsets expire after the broker's ``offsets.retention.minutes`` without commits (7 days
    by default), after which a replay of the last batch is no longer recognised. Refused at
    start (typed): a missing ``topic``; a sink id another query owns (``SinkOwnerError``,
    see ``take_over``); rows without ``record_id``; in idempotent mode,
    ``spark.speculation`` on (two attempts of a task writing at once cannot be fenced without
    transactions). Failures while writing are typed too (``spark_ext.sinks.errors``):
    an undelivered record (``ProduceFailedError``, nothing recorded), a ``partition`` the topic
    lacks, output trimmed below the recorded offsets (``ReplayUnprovableError``).
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
        # checks the owner, fences older drivers (run epoch), records the owner, aborts slice
        # transactions left open, finds the recorded and a partly committed batch
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
