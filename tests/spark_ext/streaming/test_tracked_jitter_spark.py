"""The headline guarantee through real Spark and Kafka: output + late rows = every input row once.

Three partitions whose event times jitter by up to 3 s inside each partition; partition 2 is
slow (its second half arrives only after the others are drained); the query allows 1 s of
disorder per partition. Before the gate, rows below an already-released window were folded
into state that nothing flushed (126 of 1,800 lost in the issue's run). Now each row is in
exactly one of the windows table or the late table, and the late table holds exactly the
rows that broke their partition's 1 s promise.
"""

from __future__ import annotations

import random
import time

import pandas as pd
import pytest
from pyspark.sql import functions as F

from connectors.kafka import produce, read_stream
from jobs.tracker_windows import EPOCH, event, marker, parse
from spark_ext.streaming import Closing
from spark_ext.streaming.envelope import REASON_BELOW_FRONTIER
from spark_ext.tracker import LocalTrackingAgent
from tests.spark_ext.streaming.conftest import count_per_window

pytestmark = pytest.mark.integration

N, PARTS, SLOW, JITTER_MS, DISORDER_MS = 1800, 3, 2, 3_000, 1_000
EPOCH_MS = int(EPOCH.timestamp() * 1000)


def jittered(seed: int = 11) -> list[dict]:
    rng, offsets, rows = random.Random(seed), [0] * PARTS, []
    for i in range(N):
        p = i % PARTS
        t = 5_000 + i * 100 - rng.randint(0, JITTER_MS)
        rows.append({"p": p, "offset": offsets[p], "key": f"u{i % 5}", "t": t})
        offsets[p] += 1
    return rows


def broken_promises(rows: list[dict]) -> set[tuple[int, int]]:
    out, top = set(), {}
    for r in sorted(rows, key=lambda r: (r["p"], r["offset"])):
        if r["p"] in top and r["t"] < top[r["p"]] - DISORDER_MS:
            out.add((r["p"], r["offset"]))
        top[r["p"]] = max(top.get(r["p"], r["t"]), r["t"])
    return out


def records(rows: list[dict]):
    return [(r["key"].encode(), event(r["key"], 1.0, r["t"]), r["p"]) for r in rows]


def test_jittered_partitions_and_a_slow_one_give_output_plus_late_rows_equal_to_the_input(
    spark, kafka_bootstrap, new_topic, tmp_path
):
    topic = new_topic("trk-jitter", partitions=PARTS)
    rows = jittered()
    half = [r for r in rows if r["p"] == SLOW][: N // PARTS // 2]
    first = [r for r in rows if r["p"] != SLOW] + half
    rest = [r for r in rows if r["p"] == SLOW and r not in half]
    agent = LocalTrackingAgent(tmp_path / "agent")
    query, q = count_per_window(
        parse(read_stream(spark, kafka_bootstrap, topic, max_offsets_per_trigger=400)),
        agent,
        Closing.partitions(topic, PARTS, disorder=DISORDER_MS),
        "jit",
        tmp_path,
    )
    try:
        produce(kafka_bootstrap, topic, records(first))
        q.processAllAvailable()
        produce(kafka_bootstrap, topic, records(rest))
        produce(kafka_bootstrap, topic, [(None, marker(10**7), p) for p in range(PARTS)])
        deadline = time.monotonic() + 300
        while agent.state().open_substreams() and time.monotonic() < deadline:
            q.processAllAvailable()
        q.processAllAvailable()  # the flush batch of the last end events
    finally:
        q.stop()

    windows = spark.read.format("delta").load(str(tmp_path / "windows")).toPandas()
    late = spark.read.format("delta").load(str(tmp_path / "late")).toPandas()
    assert int(windows["count"].sum()) + len(late) == N  # nothing lost, nothing twice
    got_late = {
        (int(p), int(o)) for p, o in zip(late["src_partition"], late["src_offset"], strict=True)
    }
    assert got_late == broken_promises(rows) and len(got_late) == len(late) > 0
    assert set(late["reason"]) == {REASON_BELOW_FRONTIER}
    # every folded row is in its own window: the windows equal the non-late rows' counts
    kept = pd.DataFrame([r for r in rows if (r["p"], r["offset"]) not in got_late])
    want = kept.groupby([(EPOCH_MS + kept["t"]) // 10_000 * 10_000, "key"]).size()
    have = windows.set_index(["window_start_ms", "key"])["count"].sort_index()
    assert have.to_dict() == want.sort_index().to_dict()
    assert agent.state().open_substreams() == []
    assert query.handler.late_rows == {REASON_BELOW_FRONTIER: len(late)}
    assert (
        spark.read.format("delta")
        .load(str(tmp_path / "late"))
        .where(F.col("window").isNull())
        .count()
        == 0
    )
