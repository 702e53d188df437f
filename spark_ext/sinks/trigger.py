"""When micro-batches run (:class:`Trigger`), and the checks every exactly-once sink makes of its
query options."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from pyspark.sql import DataFrame
from pyspark.sql.streaming import DataStreamWriter

from spark_ext.sinks.errors import SinkConfigError
from spark_ext.sinks.protocol import validate_sink_id

__all__ = ["DEFAULT_TRIGGER", "Trigger", "check_sink_query"]


@dataclass(frozen=True)
class Trigger:
    """When micro-batches run: ``available_now`` (drain what is there, then stop) or every
    ``processing_time`` (e.g. ``"1 second"``)."""

    available_now: bool = False
    processing_time: str | None = None

    def __post_init__(self) -> None:
        if self.available_now == (self.processing_time is not None):
            raise SinkConfigError(
                "trigger", "set exactly one of available_now=True or processing_time"
            )

    def apply(self, writer: DataStreamWriter) -> DataStreamWriter:
        if self.available_now:
            return writer.trigger(availableNow=True)
        return writer.trigger(processingTime=self.processing_time or "0 seconds")


DEFAULT_TRIGGER = Trigger(processing_time="1 second")


def check_sink_query(df: DataFrame, checkpoint: str | Path, sink_id: str) -> str:
    """The checkpoint location as a string, once the sink id, a streaming ``df`` and a
    checkpoint are checked (else :class:`SinkConfigError`)."""
    validate_sink_id(sink_id)
    if not df.isStreaming:
        raise SinkConfigError("df", "exactly-once sinks take a streaming DataFrame")
    if not str(checkpoint):
        raise SinkConfigError("checkpoint", "a checkpoint location is required")
    return str(checkpoint)
