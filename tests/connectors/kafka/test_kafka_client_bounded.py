"""A client call that ignores its own timeout is given up at a deadline of the sink's.

librdkafka's ``send_offsets_to_transaction`` blocks past its timeout when the group
coordinator restarted (confluentinc/librdkafka#5456); the sliced Kafka sink's task then hung
for good after a broker restart (``tests/connectors/kafka/test_sink_broker_restart.py``).
"""

from __future__ import annotations

import threading
import time

import pytest

from connectors.kafka.records import bounded
from spark_ext.sinks import ClientStalledError


def test_a_call_past_its_deadline_raises_client_stalled_naming_it():
    release = threading.Event()
    started = time.monotonic()
    with pytest.raises(ClientStalledError, match="adding offsets") as caught:
        bounded(release.wait, "adding offsets", 0.3)
    assert 0.3 <= time.monotonic() - started < 2.0
    assert caught.value.waited_s == 0.3
    release.set()  # the stalled thread ends once something releases it


def test_a_call_that_raises_in_time_raises_its_own_error():
    def fail() -> None:
        raise KeyError("fenced")

    with pytest.raises(KeyError, match="fenced"):
        bounded(fail, "adding offsets", 5.0)


def test_a_call_that_returns_in_time_returns():
    calls: list[int] = []
    assert bounded(lambda: calls.append(1), "adding offsets", 5.0) is None
    assert calls == [1]
