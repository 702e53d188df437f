"""Task-side facts every sink's stream writer needs: the micro-batch id, partition and attempt."""

from __future__ import annotations

from spark_ext.sinks.errors import NotAStreamTaskError

__all__ = ["BATCH_ID_PROPERTY", "current_batch_id", "stream_batch_id", "task_attempt"]

#: Local property Spark's micro-batch engine sets on every job of a batch.
BATCH_ID_PROPERTY = "streaming.sql.batchId"


def stream_batch_id() -> int | None:
    """The micro-batch id of the running task, ``None`` outside a streaming task."""
    from pyspark import TaskContext

    ctx = TaskContext.get()
    value = ctx.getLocalProperty(BATCH_ID_PROPERTY) if ctx else None
    return int(value) if value is not None else None


def current_batch_id() -> int:
    """The micro-batch id of the running task; :class:`NotAStreamTaskError` outside one."""
    batch_id = stream_batch_id()
    if batch_id is None:
        raise NotAStreamTaskError(f"no {BATCH_ID_PROPERTY} local property: not a stream task")
    return batch_id


def task_attempt() -> tuple[int, int]:
    """``(partition id, attempt number)`` of the running task, ``(0, 0)`` outside a task;
    the stage attempt is not exposed (docs/design.md, "Sink commit protocol")."""
    from pyspark import TaskContext

    ctx = TaskContext.get()
    if ctx is None:
        return 0, 0
    return ctx.partitionId(), ctx.attemptNumber()
