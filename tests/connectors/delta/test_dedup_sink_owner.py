"""The dedup sinks record their owner (issue #24, N11): a second query with the sink id stops.

Both dedup sinks run in ``foreachBatch`` and learn their owner from the batch (Spark's query
id). Query X writes the output and the catalog with sink id ``s5``; query Y (other input, its
own checkpoint) with the same sink id stops at its first batch with ``SinkOwnerError`` naming
X, before anything of its batch is written; its batch 0 used to be taken for X's batch 0 and
skipped. With ``take_over=True`` Y's rows are written once and X, restarted, is refused.
"""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import pytest
from deltalake import DeltaTable
from pyspark.errors import StreamingQueryException

from connectors.delta.dedup_sink import DeltaDedupSink
from spark_ext.dedup import DedupConfig, DedupMetrics, DedupSink
from spark_ext.sinks.errors import SinkConfigError
from tests.conftest import await_done

pytestmark = pytest.mark.integration

T0 = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
#: The readings DeltaDedupSink takes.
READINGS = "reading_id string, event_time timestamp, topic string, partition int, offset long"
#: The tagged rows DedupSink takes (what the dedup operator emits).
TAGGED = f"{READINGS}, _kind string, _bucket int, _generation long, _detail string"
KINDS = ["DedupSink", "DeltaDedupSink"]


def write_input(folder: Path, topic: str, n: int, kind: str, name: str = "part-0.json") -> None:
    """``n`` distinct readings of ``topic`` as one JSON file in ``folder`` (plus the metrics
    row DedupSink reads from its tagged input)."""
    folder.mkdir(parents=True, exist_ok=True)
    rows = [
        {
            "reading_id": f"{topic}-{i}",
            "event_time": (T0 + dt.timedelta(seconds=i)).isoformat(),
            "topic": topic,
            "partition": 0,
            "offset": i,
        }
        for i in range(n)
    ]
    if kind == "DedupSink":
        rows = [
            {**r, "_kind": "new", "_bucket": i % 2, "_generation": 0} for i, r in enumerate(rows)
        ]
        rows.append({"_kind": "metrics", "_bucket": 0, "_detail": DedupMetrics(rows=n).to_json()})
    (folder / name).write_text("\n".join(json.dumps(r) for r in rows))


def make_sink(kind: str, root: Path, query: str, take_over: bool = False):
    config = DedupConfig(
        catalog_path=str(root / "catalog"),
        capacity=1_000,
        buckets=2,
        id_column="reading_id",
    )
    if kind == "DedupSink":
        return DedupSink(config, str(root / "out"), "s5", take_over=take_over)
    return DeltaDedupSink(config, root / "out", "s5", root / f"state_{query}", take_over=take_over)


def run(spark, kind: str, root: Path, query: str, take_over: bool = False) -> str:
    """Run query ``query`` (x or y) over its input folder once; returns its query id."""
    schema = TAGGED if kind == "DedupSink" else READINGS
    stream = spark.readStream.schema(schema).json(str(root / f"in_{query}"))
    q = (
        stream.writeStream.foreachBatch(make_sink(kind, root, query, take_over))
        .option("checkpointLocation", str(root / f"chk_{query}"))
        .trigger(availableNow=True)
        .start()
    )
    await_done(q, 300)
    if q.exception() is not None:
        raise q.exception()
    return q.id


def ids_by_topic(spark, root: Path) -> dict[str, tuple[dict[str, int], dict[str, int]]]:
    """{table: (rows per topic by Spark, by delta-rs)} of the output and the catalog."""
    out: dict[str, tuple[dict[str, int], dict[str, int]]] = {}
    sp = spark.read.format("delta").load(str(root / "out"))
    rs = DeltaTable(str(root / "out")).to_pandas(columns=["topic"])["topic"]
    out["out"] = (
        {r["topic"]: r["count"] for r in sp.groupBy("topic").count().collect()},
        rs.value_counts().to_dict(),
    )
    cat = spark.read.format("delta").load(str(root / "catalog"))
    cat_rs = DeltaTable(str(root / "catalog")).to_pandas(columns=["record_id"])["record_id"]
    out["catalog"] = (
        {t: n for t, n in cat.groupBy(cat.record_id.substr(1, 1)).count().collect()},
        cat_rs.str[:1].value_counts().to_dict(),
    )
    return out


@pytest.mark.parametrize("kind", KINDS)
def test_second_query_with_the_sink_id_stops_at_its_first_batch_and_writes_nothing(
    spark, tmp_path, kind
):
    write_input(tmp_path / "in_x", "x", 30, kind)
    write_input(tmp_path / "in_y", "y", 20, kind)
    x_id = run(spark, kind, tmp_path, "x")
    before = ids_by_topic(spark, tmp_path)
    assert before == {"out": ({"x": 30}, {"x": 30}), "catalog": ({"x": 30}, {"x": 30})}

    with pytest.raises(StreamingQueryException) as err:
        run(spark, kind, tmp_path, "y")
    assert "SinkOwnerError" in str(err.value) and x_id in str(err.value)
    assert ids_by_topic(spark, tmp_path) == before


@pytest.mark.parametrize("kind", KINDS)
def test_query_taking_the_sink_over_writes_its_rows_once_and_the_old_owner_is_refused(
    spark, tmp_path, kind
):
    write_input(tmp_path / "in_x", "x", 30, kind)
    write_input(tmp_path / "in_y", "y", 20, kind)
    run(spark, kind, tmp_path, "x")
    y_id = run(spark, kind, tmp_path, "y", take_over=True)
    after = ids_by_topic(spark, tmp_path)
    both = {"x": 30, "y": 20}
    assert after == {"out": (both, both), "catalog": (both, both)}

    write_input(tmp_path / "in_x", "x2", 5, kind, "part-1.json")  # X has new input when restarted
    with pytest.raises(StreamingQueryException) as err:
        run(spark, kind, tmp_path, "x")
    assert "SinkOwnerError" in str(err.value) and y_id in str(err.value)
    assert ids_by_topic(spark, tmp_path) == after


@pytest.mark.parametrize("kind", KINDS)
def test_sink_called_outside_a_query_without_an_owner_is_a_config_error(spark, tmp_path, kind):
    sink = make_sink(kind, tmp_path, "x")
    batch = spark.createDataFrame([], TAGGED if kind == "DedupSink" else READINGS)
    with pytest.raises(SinkConfigError, match="owner"):
        sink(batch, 0)
    assert not (tmp_path / "out").exists()
