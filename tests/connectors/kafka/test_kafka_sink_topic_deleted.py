"""A Kafka sink whose output topic is deleted after the start checked it (issue #24, N9).

``exactly_once_to_kafka`` checks the topic (``require_topic``), then recovers the sink. A topic
deleted in between made the recovery's ``send_offsets_to_transaction`` (kafka-python, the run
epoch's commit) wait forever: the broker answers ``UNKNOWN_TOPIC_OR_PARTITION`` and the
client retries without end. Now the call has a deadline, and past it the missing topic is
named.
"""

from __future__ import annotations

import threading
import time

import pytest

from connectors.kafka.records import existing_topics, require_topic
from connectors.kafka.settings import KafkaSinkSettings
from connectors.kafka.slices import recover_slices
from spark_ext import kafka_clients
from spark_ext.sinks.errors import TopicMissingError

pytestmark = pytest.mark.integration


def delete_topic(bootstrap: str, topic: str) -> None:
    with kafka_clients.admin(bootstrap) as admin:
        admin.delete_topics([topic])
    deadline = time.monotonic() + 30
    while topic in existing_topics(bootstrap):
        assert time.monotonic() < deadline, f"{topic} still listed 30 s after its deletion"
        time.sleep(0.2)


def test_recovery_of_a_topic_deleted_after_the_start_check_fails_naming_it(
    kafka_bootstrap, new_topic
):
    topic = new_topic("deleted-out", partitions=2)
    settings = KafkaSinkSettings(kafka_bootstrap, topic, "deleted_out", delivery_timeout_ms=5000)
    require_topic(kafka_bootstrap, topic)  # what the start checked
    delete_topic(kafka_bootstrap, topic)

    outcome: list[BaseException | object] = []

    def recover() -> None:
        try:
            outcome.append(recover_slices(settings))
        except BaseException as exc:  # handed to the test's thread
            outcome.append(exc)

    # a thread of its own, a daemon: on the code before, it never returned
    waiter = threading.Thread(target=recover, name="recover_slices", daemon=True)
    started = time.monotonic()
    waiter.start()
    waiter.join(90)  # the deadline is 35 s with a 5 s delivery timeout

    assert outcome, f"recover_slices still waiting after {time.monotonic() - started:.0f} s"
    assert isinstance(outcome[0], TopicMissingError), outcome[0]
    assert topic in str(outcome[0]) and "\n" not in str(outcome[0])
