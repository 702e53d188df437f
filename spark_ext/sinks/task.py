"""Task-side facts every sink's stream writer needs: the micro-batch id, partition and attempt.

Spark's micro-batch engine sets the batch id as a local property on every job of the batch;
PySpark exposes it, the partition id and the attempt number through ``TaskContext``. A stream
writer that runs outside such a task has no batch to stage under:
:class:`~spark_ext.sinks.errors.NotAStreamTaskError`.

Example
-------
>>> partition, attempt = task_attempt()  # doctest: +SKIP
>>> batch_id = current_batch_id()  # doctest: +SKIP
"""

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
    """``(partition id, attempt number)`` of the running task, ``(0, 0)`` outside a task.

    ``attempt`` is above 0 for a retried or speculative attempt. PySpark does not expose the
    stage attempt: a task of a re-attempted stage starts again at attempt 0.
    """
    from pyspark import TaskContext

    ctx = TaskContext.get()
    if ctx is None:
        return 0, 0
    return ctx.partitionId(), ctx.attemptNumber()
