"""A sink id reused by a second query (issue #24, N11), for both modes of the Delta sink.

The issue's reproduction: query X reads one topic and writes the table with sink id ``s5``;
later query Y reads another topic, with its own checkpoint, and writes the same table with
``s5``. Y's batch 0 was taken for a replay of X's batch 0 and skipped: Y ended without an
error and its rows were lost. Now the table records its owner (X's query id) and Y stops at
start with ``SinkOwnerError`` naming X, writing nothing; with ``take_over=True`` Y's rows are
all written once and X, restarted, is refused.
"""

from __future__ import annotations

import pytest
from deltalake import DeltaTable

from connectors.demo_events import produce_events
from connectors.sinks import Trigger, exactly_once_to_delta
from jobs.exactly_once_delta import events_stream
from spark_ext.sinks.errors import SinkOwnerError
from spark_ext.sinks.owner import owner_of_checkpoint
from tests.conftest import await_done

pytestmark = pytest.mark.integration

X_ROWS, Y_ROWS = 300, 200
MODES = ["two_phase", "idempotent"]


def run(spark, bootstrap, topic, table, chk, mode, max_offsets=None, **kwargs) -> None:
    """One run of a query writing ``topic``'s events to ``table`` with sink id ``s5`` (all of
    the topic in batch 0, unless ``max_offsets`` bounds a batch)."""
    query = exactly_once_to_delta(
        events_stream(spark, bootstrap, topic, max_offsets),
        table,
        sink_id="s5",
        checkpoint=chk,
        mode=mode,
        trigger=Trigger(available_now=True),
        **kwargs,
    )
    await_done(query, 300)
    assert query.exception() is None


def rows_by_topic(spark, table: str) -> tuple[dict[str, int], dict[str, int]]:
    """Distinct (topic, partition, offset) per topic, read by Spark and by delta-rs, and the
    row counts: {topic: rows} from each reader."""
    sp = spark.read.format("delta").load(table)
    assert sp.count() == sp.select("topic", "partition", "offset").distinct().count()
    from_spark = {r["topic"]: r["count"] for r in sp.groupBy("topic").count().collect()}
    rs = DeltaTable(table).to_pandas(columns=["topic"])
    return from_spark, rs["topic"].value_counts().to_dict()


@pytest.fixture
def topics(kafka_bootstrap, new_topic) -> tuple[str, str]:
    x, y = new_topic("owner-x"), new_topic("owner-y")
    produce_events(kafka_bootstrap, x, X_ROWS)
    produce_events(kafka_bootstrap, y, Y_ROWS)
    return x, y


@pytest.fixture(params=MODES)
def mode(request) -> str:
    return request.param


@pytest.fixture
def table(spark, kafka_bootstrap, topics, tmp_path, mode) -> str:
    """The table after query X (checkpoint ``chk_x``) wrote all of its topic."""
    table = str(tmp_path / "t")
    run(spark, kafka_bootstrap, topics[0], table, tmp_path / "chk_x", mode)
    return table


def test_second_query_with_the_sink_id_is_refused_at_start_and_writes_nothing(
    spark, kafka_bootstrap, topics, table, tmp_path, mode
):
    x, y = topics
    version = DeltaTable(table).version()

    with pytest.raises(SinkOwnerError) as err:
        run(spark, kafka_bootstrap, y, table, tmp_path / "chk_y", mode)
    assert err.value.recorded == owner_of_checkpoint(tmp_path / "chk_x").query_id
    assert err.value.ours == owner_of_checkpoint(tmp_path / "chk_y").query_id
    assert DeltaTable(table).version() == version  # not even a run epoch
    assert rows_by_topic(spark, table) == ({x: X_ROWS}, {x: X_ROWS})


def test_query_taking_the_sink_over_writes_its_rows_once_and_the_old_owner_is_refused(
    spark, kafka_bootstrap, topics, table, tmp_path, mode
):
    x, y = topics
    run(spark, kafka_bootstrap, y, table, tmp_path / "chk_y", mode, 120, take_over=True)
    both = {x: X_ROWS, y: Y_ROWS}
    assert rows_by_topic(spark, table) == (both, both)
    assert DeltaTable(table).transaction_version("s5") == 1  # Y's batches 0 and 1

    produce_events(kafka_bootstrap, x, 30, seed=11)  # X has new input when restarted
    version = DeltaTable(table).version()
    with pytest.raises(SinkOwnerError) as err:
        run(spark, kafka_bootstrap, x, table, tmp_path / "chk_x", mode)
    assert err.value.recorded == owner_of_checkpoint(tmp_path / "chk_y").query_id
    assert DeltaTable(table).version() == version
    assert rows_by_topic(spark, table) == (both, both)
