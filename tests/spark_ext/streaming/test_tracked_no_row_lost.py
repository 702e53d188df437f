"""No row vanishes: the tracked pipeline's executor functions and agent, batch by batch (no Spark).

:class:`~spark_ext.streaming.tester.PipelineTester` runs the gate, the operator groups and the
agent's state as a micro-batch query wires them (end events of batch N read by batch N+1).
Every test checks the same invariant: every input row is in exactly one of the results or
the late-rows output (with its reason), and no operator state is left that nothing flushes.
"""

from __future__ import annotations

import random

import pandas as pd

from spark_ext.operators import Count, SessionWindow, Sum, UserFunction, WindowAggregate, WindowJoin
from spark_ext.streaming import Closing
from spark_ext.streaming.envelope import (
    REASON_BELOW_FRONTIER,
    REASON_DUPLICATE,
    REASON_ENDED,
    REASON_NULL_KEY,
    REASON_NULL_TIME,
)
from spark_ext.streaming.tester import PipelineTester
from spark_ext.tracker import Tumbling

PARTS = 3


def jittered_input(n: int, jitter_ms: int, seed: int = 7) -> list[dict]:
    """n events over 3 partitions, 10 per second, each up to ``jitter_ms`` off in its partition."""
    rng = random.Random(seed)
    rows, offsets = [], [0] * PARTS
    for i in range(n):
        p = i % PARTS
        t = i * 100 + rng.randint(-jitter_ms, 0)
        rows.append({"partition": p, "offset": offsets[p], "key": f"u{i % 5}", "event_time_ms": t})
        offsets[p] += 1
    return rows


def beyond_bound(rows: list[dict], disorder_ms: int) -> set[tuple[int, int]]:
    """(partition, offset) of the rows that break "nothing below max(t) - disorder follows"."""
    out, top = set(), {}
    for r in sorted(rows, key=lambda r: (r["partition"], r["offset"])):
        p, t = r["partition"], r["event_time_ms"]
        if p in top and t < top[p] - disorder_ms:
            out.add((p, r["offset"]))
        top[p] = max(top.get(p, t), t)
    return out


def batches(rows: list[dict], slow: int, lag: int, size: int, seed: int = 3) -> list[list[dict]]:
    """Write order: partition ``slow`` ``lag`` rows behind; random batch sizes up to ``size``."""
    order = sorted(
        rows, key=lambda r: (r["offset"] + (lag if r["partition"] == slow else 0), r["partition"])
    )
    rng, out, i = random.Random(seed), [], 0
    while i < len(order):
        k = rng.randint(1, size)
        out.append(order[i : i + k])
        i += k
    return out


def closers(offsets: dict[int, int], through_ms: int) -> list[dict]:
    return [
        {"partition": p, "offset": o, "key": None, "event_time_ms": None, "close": through_ms}
        for p, o in offsets.items()
    ]


def drain(t: PipelineTester, batches_: list[list[dict]], tail: list[dict]):
    results, late = [], []
    for b in [*batches_, tail, [], []]:
        r, lt = t.run_batch(b)
        results.append(r)
        late.append(lt)
    return cat(results), cat(late)


def cat(frames: list[pd.DataFrame]) -> pd.DataFrame:
    """Concatenate, skipping empty frames (whose missing columns would turn labels to float)."""
    full = [f for f in frames if len(f)]
    return pd.concat(full, ignore_index=True) if full else frames[0]


def test_jittered_partitions_with_a_slow_one_lose_no_row_and_late_rows_are_exactly_the_broken_promises():
    rows = jittered_input(1800, jitter_ms=3_000)
    t = PipelineTester(
        WindowAggregate(Count(), UserFunction("offsets", "x", lambda v: sorted(v))),
        Tumbling(10_000, namespace="w"),
        Closing.partitions("src", PARTS, disorder=1_000),
    )
    for r in rows:
        r["x"] = r["partition"] * 1_000_000 + r["offset"]
    last = {p: 600 for p in range(PARTS)}
    got, late = drain(t, batches(rows, slow=2, lag=120, size=10), closers(last, 10**7))

    folded = [x for xs in got["offsets"] for x in xs]
    late_ids = [
        p * 1_000_000 + o for p, o in zip(late["src_partition"], late["src_offset"], strict=True)
    ]
    assert sorted(folded + late_ids) == sorted(r["x"] for r in rows)  # each row exactly once
    assert int(got["count"].sum()) + len(late) == 1800
    want_late = beyond_bound(rows, 1_000)
    assert {
        (int(p), int(o)) for p, o in zip(late["src_partition"], late["src_offset"], strict=True)
    } == want_late
    assert len(want_late) > 50 and set(late["reason"]) == {REASON_BELOW_FRONTIER}
    assert all(w.startswith("w/") for w in late["window"])
    assert not got.duplicated(["window_start_ms", "key"]).any()  # each window once
    assert t.groups == {} and t.agent.open_substreams() == []  # no state nothing flushes


def test_null_keys_null_event_times_and_an_all_null_key_chunk_go_to_late_with_their_reason():
    t = PipelineTester(
        WindowAggregate(Count()), Tumbling(10_000, namespace="w"), Closing.partitions("src", 1)
    )
    batch = [
        {"partition": 0, "offset": i, "key": None, "event_time_ms": 1_000 + i} for i in range(3)
    ]
    r1, late1 = t.run_batch(batch)  # every key null: this raised IndexError
    r2, late2 = t.run_batch(
        [
            {"partition": 0, "offset": 3, "key": "a", "event_time_ms": None},
            {"partition": 0, "offset": 4, "key": "a", "event_time_ms": 2_000},
            {"partition": 0, "offset": 5, "key": None, "event_time_ms": 3_000},
        ]
    )
    assert r1.empty and r2.empty
    got, late3 = drain(t, [], closers({0: 6}, 10**6))
    late = cat([late1, late2, late3])
    assert sorted(late["src_offset"]) == [0, 1, 2, 3, 5]
    assert dict(zip(late["src_offset"], late["reason"], strict=True)) == {
        0: REASON_NULL_KEY,
        1: REASON_NULL_KEY,
        2: REASON_NULL_KEY,
        3: REASON_NULL_TIME,
        5: REASON_NULL_KEY,
    }
    assert got["count"].tolist() == [1]
    assert t.groups == {} and t.agent.open_substreams() == []


def test_a_late_row_does_not_open_a_second_overlapping_session():
    t = PipelineTester(
        SessionWindow(5_000, Count()), Tumbling(5_000, namespace="s"), Closing.partitions("src", 1)
    )
    rows = [{"partition": 0, "offset": i, "key": "a", "event_time_ms": i * 1_000} for i in range(4)]
    rows += [{"partition": 0, "offset": 4, "key": "a", "event_time_ms": 40_000}]
    first, _ = t.run_batch(rows)  # the session [0, 8 s) is emitted by this very batch
    # a row at 2 s arrives after its partition passed 40 s: late, not a second session
    r, late = t.run_batch([{"partition": 0, "offset": 5, "key": "a", "event_time_ms": 2_000}])
    got, late2 = drain(t, [], closers({0: 6}, 100_000))
    sessions = cat([first, r, got])
    assert sorted(sessions["session_start_ms"].tolist()) == [0, 40_000]  # the last one too
    assert cat([late, late2])["src_offset"].tolist() == [5]
    assert t.groups == {}


def test_sessions_end_at_the_end_of_input_by_a_marker_past_buckets_without_data():
    t = PipelineTester(
        SessionWindow(5_000, Count()), Tumbling(5_000, namespace="s"), Closing.partitions("src", 2)
    )
    rows = [{"partition": 0, "offset": 0, "key": "a", "event_time_ms": 4_000}]
    rows += [{"partition": 1, "offset": 0, "key": "b", "event_time_ms": 4_500}]
    t.run_batch(rows)
    got, late = drain(t, [], closers({0: 1, 1: 1}, 30_000))
    assert sorted(got["key"]) == ["a", "b"] and late.empty  # ended by the markers alone
    assert t.groups == {}


def test_a_duplicated_forwarded_row_neither_stalls_nor_double_counts_the_downstream_window():
    up = PipelineTester(
        WindowAggregate(Count()),
        Tumbling(10_000, namespace="up"),
        Closing.partitions("src", 1),
        forward_namespace="down",
        query="up",
    )
    down = PipelineTester(
        WindowAggregate(Count(name="rows"), Sum("count", name="events")),
        Tumbling(10_000, namespace="down"),
        Closing.upstream(),
        upstream=True,
        query="down",
        agent=up.agent,  # one agent for both queries
    )
    rows = [
        {"partition": 0, "offset": i, "key": f"u{i % 3}", "event_time_ms": i * 1_000}
        for i in range(12)
    ]
    first, _ = up.run_batch(rows)  # window [0, 10 s) is released by this batch
    fwd, _ = drain(up, [], closers({0: 12}, 60_000))
    fwd = cat([first, fwd])
    assert len(fwd) == 5 and fwd["fwd_substream"].notna().all()
    records = [
        {
            "topic": "mid",
            "partition": 0,
            "offset": i,
            "key": "all",
            "event_time_ms": int(r.window_start_ms),
            "count": int(r.count),
            "fwd_substream": r.fwd_substream,
            "fwd_label": int(r.fwd_label),
        }
        for i, r in enumerate(fwd.itertuples())
    ]
    dup_in = dict(records[0], offset=4)  # replayed upstream batch: same row, new offset
    dup_after = dict(records[1], offset=5)
    out1, late1 = down.run_batch([*records, dup_in])
    out2, late2 = down.run_batch([])  # end events of both windows are read here
    out3, late3 = down.run_batch([dup_after])  # a duplicate after its window ended
    got = cat([out1, out2, out3])
    late = cat([late1, late2, late3])
    assert sorted(got["rows"]) == [2, 3] and got["events"].sum() == 12  # no double count
    assert dict(zip(late["src_offset"], late["reason"], strict=True)) == {
        4: REASON_DUPLICATE,
        5: REASON_ENDED,
    }
    assert up.agent.open_substreams() == []  # no stall: both downstream windows ended
    assert all('"op":null' in v for v in down.groups.values())  # only tombstones remain


def test_window_join_with_forward_to_feeds_a_downstream_that_counts_every_pair():
    up = PipelineTester(
        WindowJoin(("x",), ("x",)),
        Tumbling(10_000, namespace="j"),
        Closing.partitions("src", 1),
        forward_namespace="jd",
        query="up",
    )
    rows = [
        {"partition": 0, "offset": 0, "key": "a", "event_time_ms": 1_000, "side": "left", "x": 1},
        {"partition": 0, "offset": 1, "key": "a", "event_time_ms": 2_000, "side": "right", "x": 2},
        {"partition": 0, "offset": 2, "key": "a", "event_time_ms": 3_000, "side": "right", "x": 3},
    ]
    out1, _ = up.run_batch(rows[:2])
    out2, _ = up.run_batch(rows[2:])
    out3, _ = drain(up, [], closers({0: 3}, 60_000))
    pairs = cat([out1, out2, out3])
    assert len(pairs) == 2 and pairs["fwd_substream"].eq("jd/0/10000").all()  # was None
    assert pairs["fwd_label"].nunique() == 2  # one label per forwarded pair
    down = PipelineTester(
        WindowAggregate(Count()),
        Tumbling(10_000, namespace="jd"),
        Closing.upstream(),
        upstream=True,
        query="down",
        agent=up.agent,
    )
    recs = [
        {
            "topic": "mid",
            "partition": 0,
            "offset": i,
            "key": "a",
            "event_time_ms": 0,
            "fwd_substream": r.fwd_substream,
            "fwd_label": int(r.fwd_label),
        }
        for i, r in enumerate(pairs.itertuples())
    ]
    got, late = drain(down, [recs], [])
    assert got["count"].tolist() == [2] and late.empty
    assert up.agent.open_substreams() == []
