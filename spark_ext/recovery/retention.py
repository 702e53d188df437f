"""Retention faults: the output loses evidence between a kill at the point and the restart
(docs/design.md, "Fault points"; invariant 6)."""

from __future__ import annotations

import dataclasses
import logging
import re
import time
from pathlib import Path

from spark_ext import storage
from spark_ext.recovery.case import RecoveryCase, RecoveryResult, delta_table
from spark_ext.recovery.classification import classify, without
from spark_ext.recovery.errors import RetentionNotApplied
from spark_ext.recovery.faults import FaultCell
from spark_ext.recovery.runs import CleanRun, JobRuns, judge, typed_error

__all__ = [
    "TXN_RETENTION",
    "TXN_RETENTION_WAIT_S",
    "expire_txns",
    "run_retention_cell",
    "trim_delta_log",
    "trim_topic",
]

log = logging.getLogger(__name__)

#: The retention the ``txn-retention`` cells give the output, and how long they wait it out.
TXN_RETENTION = "interval 1 seconds"
TXN_RETENTION_WAIT_S = 2.5


def trim_topic(bootstrap: str, topic: str) -> dict[int, int]:
    """Delete every record of ``topic`` up to each partition's last stable offset (why:
    docs/design.md, "Fault points"); returns the new log starts (none: ``RetentionNotApplied``)."""
    from kafka import TopicPartition

    from spark_ext.kafka_clients import admin, consumer

    reader = consumer(bootstrap, enable_auto_commit=False, isolation_level="read_committed")
    try:
        parts = [TopicPartition(topic, p) for p in sorted(reader.partitions_for_topic(topic) or [])]
        begin = reader.beginning_offsets(parts)
        end = reader.end_offsets(parts)
    finally:
        reader.close()
    todo = {tp: end[tp] for tp in parts if end[tp] > begin[tp]}
    if not todo:
        raise RetentionNotApplied(topic, "no record to trim")
    with admin(bootstrap) as client:
        client.delete_records(todo)
    log.info("trimmed %s to %s", topic, {tp.partition: o for tp, o in todo.items()})
    return {tp.partition: o for tp, o in todo.items()}


def expire_txns(table: str | Path, settings: storage.StorageSettings | None = None) -> None:
    """Expire every ``txn`` of the Delta table at ``table`` (:data:`TXN_RETENTION`, waited out)."""
    delta_table(table, settings).alter.set_table_properties(
        {"delta.setTransactionRetentionDuration": TXN_RETENTION}
    )
    time.sleep(TXN_RETENTION_WAIT_S)
    log.info("txn retention of %s set to %s and waited out", table, TXN_RETENTION)


def trim_delta_log(table: str | Path, settings: storage.StorageSettings | None = None) -> int:
    """Trim the log of the Delta table at ``table`` to a new checkpoint (docs/design.md, "Fault
    points": ``log-retention``); returns how many commit files went (at least one, or
    :class:`RetentionNotApplied`)."""
    log_dir = storage.Location.parse(table).join("_delta_log")
    delta_table(table, settings).alter.set_table_properties(
        {"delta.logRetentionDuration": TXN_RETENTION}
    )
    dt = delta_table(table, settings)
    dt.create_checkpoint()
    names = storage.list_prefix(log_dir, settings)
    expired = [n for n in names if re.fullmatch(r"\d{20}\.json", n) and int(n[:20]) < dt.version()]
    if not expired:
        raise RetentionNotApplied(str(table), "no commit file before the checkpoint")
    for name in expired:
        storage.delete(log_dir.join(name), settings)
    log.info("log of %s trimmed to the checkpoint of version %d", table, dt.version())
    return len(expired)


def run_retention_cell(
    runs: JobRuns, case: RecoveryCase, cell: FaultCell, clean: CleanRun
) -> list[RecoveryResult]:
    """Kill ``case`` at ``cell``'s point, expire its output as retention would, restart it."""
    ctx = dataclasses.replace(clean.ctx, profile=runs.fault_profile)
    slot = ctx.slot(str(cell.fault))
    run = runs.fault_run(case, cell, ctx)
    written = {o.name: case.read_output(ctx, slot, o.name) for o in case.outputs}
    case.expire_output(ctx, slot, cell.fault)
    kept = {o.name: case.read_output(ctx, slot, o.name) for o in case.outputs}
    removed = {o.name: without(written[o.name], kept[o.name], o.spec) for o in case.outputs}
    again = runs.runner(case.module, case.restart_args(ctx, slot), timeout_s=runs.timeout_s)
    error = typed_error(case, f"{cell.fault} restarted", again)
    note = f"killed, {sum(map(len, removed.values()))} rows expired, " + (
        f"restart stopped with {error}" if error else "restarted"
    )
    compared = {}
    for out in case.outputs:
        final = case.read_output(ctx, slot, out.name)
        if error:  # a typed error must have written nothing after the expiry
            comparison = classify(kept[out.name], final, out.spec)
        else:  # consumers saw the expired rows and the output after the restart
            comparison = classify(clean.rows[out.name], [*removed[out.name], *final], out.spec)
        compared[out.name] = (comparison, len(kept[out.name]))
    seconds = {"clean": clean.seconds, "fault": run.seconds, "restarted": again.seconds}
    return judge(case, cell.fault, cell.describe(), compared, seconds, note, error)
