"""The ``output-trim`` fault trims what retention could trim: records a consumer could read.

A kill can leave a transaction open in the output topic while a later transaction (another
task's slice) commits after it. No consumer reads past the open transaction's first record
(the last stable offset) until the broker aborts it, and no retention reaches those records
before that. Trimming to the high watermark deleted the later, committed slice unread: the
sliced Kafka sink's ``output-trim`` cell then reported a gap the sink did not make (seen once
in a full matrix run, depending on where the other task was at the kill).
"""

from __future__ import annotations

import pytest
from kafka import KafkaProducer

from connectors.kafka import consume_all
from spark_ext.recovery.retention import trim_topic

pytestmark = pytest.mark.integration


def producer(bootstrap: str, txn_id: str) -> KafkaProducer:
    p = KafkaProducer(bootstrap_servers=bootstrap, transactional_id=txn_id)
    p.init_transactions()
    return p


def send_all(p: KafkaProducer, topic: str, values: list[bytes]) -> None:
    for v in values:
        p.send(topic, v, partition=0).get(timeout=30)


def test_trim_stops_at_an_open_transaction_and_spares_the_committed_records_after_it(
    kafka_bootstrap, new_topic
):
    topic = new_topic("trim", partitions=1)
    tag = topic[-6:]
    read = producer(kafka_bootstrap, f"trim-read-{tag}")
    read.begin_transaction()
    send_all(read, topic, [b"read-1", b"read-2"])
    read.commit_transaction()
    hanging = producer(kafka_bootstrap, f"trim-open-{tag}")
    hanging.begin_transaction()
    send_all(hanging, topic, [b"open-1"])  # written, never committed: a killed task's slice
    later = producer(kafka_bootstrap, f"trim-later-{tag}")
    later.begin_transaction()
    send_all(later, topic, [b"later-1", b"later-2"])
    later.commit_transaction()
    try:
        starts = trim_topic(kafka_bootstrap, topic)
        # The records before the open transaction are trimmed: a consumer could read them.
        assert starts == {0: 3}  # read-1, read-2, read's commit marker
    finally:
        hanging.abort_transaction()  # what the restarted sink's fencing does
        for p in (read, hanging, later):
            p.close()
    values = [v for _, _, _, v in consume_all(kafka_bootstrap, topic)]
    assert values == [b"later-1", b"later-2"]
