"""The tracker: labels, XOR reports, the tracking agents and the end-event source; a substream
ends when its source closed it and its running XOR is 0 (docs/design.md, "Tracker")."""

from spark_ext.tracker.agent import EndEvent, LocalTrackingAgent, TrackerState, TrackingAgent
from spark_ext.tracker.kafka_agent import KafkaEndLog, KafkaTrackingAgent
from spark_ext.tracker.labels import label_of, labels_of, xor_fold
from spark_ext.tracker.reports import Report, ReportKey, TaskReport, batch_reports
from spark_ext.tracker.substreams import Sliding, Substream, Tumbling

__all__ = [
    "EndEvent",
    "KafkaEndLog",
    "KafkaTrackingAgent",
    "LocalTrackingAgent",
    "Report",
    "ReportKey",
    "Sliding",
    "Substream",
    "TaskReport",
    "TrackerState",
    "TrackingAgent",
    "Tumbling",
    "batch_reports",
    "label_of",
    "labels_of",
    "xor_fold",
]
