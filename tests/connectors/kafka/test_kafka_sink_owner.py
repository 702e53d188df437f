"""A Kafka sink id belongs to one query; a second one is refused, a hand-over is explicit
(issue #24, N11).

The issue's repro, in every Kafka sink: query X writes ``out`` with sink id ``s5``; later query
Y (another input topic, its own checkpoint) writes ``out`` with ``s5``. Before, Y's batch 0 was
taken for a replay of X's batch 0 and skipped: Y ended without an error and none of its rows
were in ``out``.
"""

from __future__ import annotations

import json
import uuid
from collections import Counter

import pytest

from connectors import kafka
from connectors.demo_events import produce_events
from connectors.kafka.idempotent import KafkaIdempotentWriter
from connectors.kafka.progress import SinkProgress
from connectors.kafka.sliced_writer import KafkaTwoPhaseWriter
from connectors.sinks import Trigger, exactly_once_to_kafka
from jobs.exactly_once_kafka import forward
from spark_ext.sinks.errors import SinkConfigError, SinkOwnerError
from tests.conftest import await_done

pytestmark = pytest.mark.integration


def sources(bootstrap: str, topic: str) -> Counter:
    """How many records of each input topic are in ``topic`` (each input record once: the
    caller compares with the input counts)."""
    got = kafka.consume_all(bootstrap, topic, read_committed=True)
    coords = Counter(
        (src["topic"], src["partition"], src["offset"])
        for src in (json.loads(value) for _, _, _, value in got)
    )
    assert set(coords.values()) <= {1}, "a record written twice"
    return Counter(t for t, _, _ in coords)


@pytest.mark.parametrize("mode", ["two_phase", "idempotent"])
def test_a_second_query_with_the_sink_id_is_refused_unless_it_takes_the_sink_over(
    spark, kafka_bootstrap, new_topic, tmp_path, mode
):
    x_in, y_in, out = new_topic("owner-x"), new_topic("owner-y"), new_topic("owner-out")
    produce_events(kafka_bootstrap, x_in, 30)
    produce_events(kafka_bootstrap, y_in, 20)

    def start(source: str, name: str, **kw):
        df = forward(kafka.read_stream(spark, kafka_bootstrap, source))
        return exactly_once_to_kafka(
            df,
            out,
            bootstrap=kafka_bootstrap,
            sink_id="s5",
            checkpoint=str(tmp_path / name),
            mode=mode,
            trigger=Trigger(available_now=True),
            **kw,
        )

    x = start(x_in, "x")
    await_done(x, 300)
    assert x.exception() is None

    with pytest.raises(SinkOwnerError) as refused:
        start(y_in, "y")  # at start, before it writes, fences or records anything
    assert x.id in str(refused.value) and "\n" not in str(refused.value)
    assert sources(kafka_bootstrap, out) == {x_in: 30}

    y = start(y_in, "y", take_over=True)
    await_done(y, 300)
    assert y.exception() is None
    assert sources(kafka_bootstrap, out) == {x_in: 30, y_in: 20}
    recorded = SinkProgress(kafka_bootstrap, out, "s5").read()
    assert (recorded.owner, recorded.batch_id) == (y.id, 0)

    produce_events(kafka_bootstrap, x_in, 10)  # X restarted has a batch to write: refused
    with pytest.raises(SinkOwnerError):
        start(x_in, "x")
    assert sources(kafka_bootstrap, out) == {x_in: 30, y_in: 20}


def rows(spark, tag: str, n: int = 10):
    data = [(f"k{i}", f"{tag}-{i}", f"{tag}/{i}") for i in range(n)]
    return spark.createDataFrame(data, "key string, value string, record_id string").repartition(2)


def values(bootstrap: str, topic: str) -> Counter:
    return Counter(v.decode() for _, _, _, v in kafka.consume_all(bootstrap, topic))


@pytest.mark.parametrize("writer", [KafkaTwoPhaseWriter, KafkaIdempotentWriter])
def test_a_foreach_batch_writer_checks_its_owner_at_its_first_batch(
    spark, kafka_bootstrap, new_topic, writer
):
    """Called outside a streaming query a writer needs ``owner=``; another owner's first
    batch is refused; ``take_over`` restarts the batch ids, and the old owner's next batch is
    refused, even by a writer that checked its owner before the hand-over."""
    out = new_topic("owner-fb", partitions=2)
    x, y = str(uuid.uuid4()), str(uuid.uuid4())
    with pytest.raises(SinkConfigError, match="owner"):
        writer(kafka_bootstrap, out, "fb")(rows(spark, "none"), 0)

    first = writer(kafka_bootstrap, out, "fb", owner=x)
    first(rows(spark, "x0"), 0)
    first(rows(spark, "x1"), 1)
    with pytest.raises(SinkOwnerError):
        writer(kafka_bootstrap, out, "fb", owner=y)(rows(spark, "y0"), 0)

    second = writer(kafka_bootstrap, out, "fb", owner=y, take_over=True)
    second(rows(spark, "y0"), 0)  # batch 0 again: written, not taken for x's batch 0
    with pytest.raises(SinkOwnerError):
        first(rows(spark, "x2"), 2)  # the old owner's writer, still running

    want = Counter(f"{t}-{i}" for t in ("x0", "x1", "y0") for i in range(10))
    assert values(kafka_bootstrap, out) == want
    assert SinkProgress(kafka_bootstrap, out, "fb").read().owner == y
