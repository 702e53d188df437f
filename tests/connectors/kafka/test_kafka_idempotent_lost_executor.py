"""An idempotent-Kafka task attempt on an executor declared lost but still running
(issue #24, suspicion (a)).

Spark runs a new attempt of a task whose executor it declared lost; the old attempt may still
run (a network partition from the driver, not from Kafka). Two attempts then write the same
records. Before, the new attempt read back what was in the topic and wrote the rest while the
old one kept writing its remaining records: those were written twice (30 records for 20).

The two attempts run here in two threads of the test process against the real broker, as
two tasks of one slice would: the task facts (partition 0, attempts 0 and 1) are the only
thing given by the test instead of Spark.
"""

from __future__ import annotations

import threading
from collections import Counter

import pyarrow as pa
import pytest

import connectors.kafka.idempotent as idempotent
from connectors import kafka
from connectors.kafka.settings import KafkaSinkSettings
from spark_ext.sinks.errors import WriterFencedError

pytestmark = pytest.mark.integration


def chunk(lo: int, n: int = 10) -> pa.RecordBatch:
    return pa.RecordBatch.from_pydict(
        {
            "value": [f"v{i}" for i in range(lo, lo + n)],
            "record_id": [f"in/0/{i}" for i in range(lo, lo + n)],
        }
    )


def test_a_lost_attempt_still_running_stops_and_every_record_is_written_once(
    kafka_bootstrap, new_topic, monkeypatch
):
    out = new_topic("idem-lost", partitions=2)
    monkeypatch.setattr(
        idempotent,
        "task_attempt",
        lambda: (0, 1 if threading.current_thread().name == "attempt-1" else 0),
    )
    settings = KafkaSinkSettings(kafka_bootstrap, out, "idem_lost", delivery_timeout_ms=2000)
    region = idempotent.output_region(settings, 0, None)
    writer = idempotent.SliceWriter(settings, 0, region, run="run-1")
    between, resume = threading.Event(), threading.Event()
    errors: dict[str, BaseException] = {}

    def lost_attempt_rows():
        yield chunk(0)
        between.set()  # Spark declares the executor lost here; the attempt keeps running
        resume.wait(60)
        yield chunk(10)

    def attempt(rows) -> None:
        try:
            list(writer(rows))
        except BaseException as exc:  # handed to the test's thread
            errors[threading.current_thread().name] = exc

    lost = threading.Thread(target=attempt, args=(lost_attempt_rows(),), name="attempt-0")
    lost.start()
    assert between.wait(60)
    retry = threading.Thread(target=attempt, args=(iter([chunk(0), chunk(10)]),), name="attempt-1")
    retry.start()
    retry.join(120)
    resume.set()
    lost.join(120)

    got = Counter(v.decode() for _, _, _, v in kafka.consume_all(kafka_bootstrap, out))
    assert sum(got.values()) == 20 and set(got) == {f"v{i}" for i in range(20)}, got
    assert set(errors) == {"attempt-0"} and isinstance(errors["attempt-0"], WriterFencedError)
