"""Delivery checks of the Kafka sinks: every produce future is looked at before a batch counts.

kafka-python 3.0.12 fails the future of a record whose batch expired after
``delivery_timeout_ms`` but does not poison the transaction it belongs to, so
``commit_transaction()`` succeeds without the record (the bug KAFKA-5385 fixed in the Java
client). ``flush()`` returns once every future is done, failed ones included. So a sink must
watch every future and refuse to record a batch if any failed (:class:`DeliveryCheck`).
"""

from __future__ import annotations

import threading
from typing import Any

from spark_ext.sinks.errors import ProduceFailedError

__all__ = ["DeliveryCheck"]


class DeliveryCheck:
    """Counts the records a producer failed to deliver (an errback on every send's future).

    Example
    -------
    >>> check = DeliveryCheck()
    >>> check.failed
    0
    >>> check.raise_if_failed("s", 3)   # nothing failed: returns
    """

    def __init__(self) -> None:
        self.failed = 0
        self.partitions: set[int] = set()
        self.first: BaseException | None = None
        self._lock = threading.Lock()

    def watch(self, future: Any) -> Any:
        """Register ``future`` (a ``producer.send`` result); returns it."""
        future.add_errback(self._on_failure, future)
        return future

    def _on_failure(self, future: Any, exc: BaseException) -> None:
        produce = getattr(future, "_produce_future", None)
        tp = getattr(produce, "topic_partition", None)
        with self._lock:
            self.failed += 1
            if tp is not None:
                self.partitions.add(tp[1])
            if self.first is None:
                self.first = exc

    def raise_if_failed(self, sink_id: str, batch_id: int) -> None:
        """After ``producer.flush()``: :class:`ProduceFailedError` if any record failed."""
        with self._lock:
            if self.failed:
                raise ProduceFailedError(
                    sink_id, batch_id, self.failed, self.partitions, self.first
                )
