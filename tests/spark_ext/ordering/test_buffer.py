"""The ordering buffer and the shard step as pure logic (no Spark): order, release, replay."""

from __future__ import annotations

import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jobs.ordering_dedup import EwmaFahrenheit
from spark_ext.errors import ConfigError
from spark_ext.ordering import (
    CLOSED,
    KIND_END,
    KIND_PROGRESS,
    KIND_ROW,
    MARKED_SCHEMA,
    OrderingBuffer,
    OrderingBufferFull,
    OrderingConfig,
    ShardProcessor,
)

pytestmark = pytest.mark.filterwarnings("ignore::FutureWarning")

TOPIC = "t"


def elements(rows):
    """rows: (event_time_ms, partition, offset, key)."""
    return pd.DataFrame(
        {
            "event_time_ms": [r[0] for r in rows],
            "topic": TOPIC,
            "partition": [r[1] for r in rows],
            "offset": [r[2] for r in rows],
            "key": [r[3] for r in rows],
            "record_id": [f"{r[3]}-{r[0]}" for r in rows],
            "value": [float(r[0]) for r in rows],
        }
    )


def buffer(**kw):
    return OrderingBuffer(partitions=(f"{TOPIC}/0", f"{TOPIC}/1"), **kw)


def test_nothing_is_released_until_every_partition_reported():
    b = buffer()
    b.offer(elements([(10, 0, 0, "a"), (5, 0, 1, "a")]))
    b.observe(TOPIC, 0, 10)
    assert b.release().in_order.empty
    b.observe(TOPIC, 1, 7)
    out = b.release().in_order
    assert out["event_time_ms"].tolist() == [5]  # below min progress 7, in order
    assert len(b.elements) == 1


def test_release_follows_the_total_order_with_ties_by_partition_and_offset():
    b = buffer()
    b.offer(elements([(5, 1, 9, "a"), (5, 0, 3, "a"), (5, 0, 2, "b"), (3, 1, 1, "a")]))
    b.observe(TOPIC, 0, CLOSED)
    b.observe(TOPIC, 1, CLOSED)
    out = b.release().in_order
    assert list(zip(out.event_time_ms, out.partition, out.offset, strict=True)) == [
        (3, 1, 1),
        (5, 0, 2),
        (5, 0, 3),
        (5, 1, 9),
    ]


def test_end_event_releases_its_key_without_progress():
    b = buffer()
    b.offer(elements([(1, 0, 0, "a"), (2, 0, 1, "b")]))
    b.end("a")
    released = b.release()
    assert released.in_order["key"].tolist() == ["a"]
    assert released.ended_keys == ["a"]
    assert b.elements["key"].tolist() == ["b"]


def test_element_behind_released_order_is_reported_late():
    b = buffer()
    b.observe(TOPIC, 0, 100)
    b.observe(TOPIC, 1, 100)
    b.offer(elements([(50, 0, 0, "a")]))
    assert len(b.release().in_order) == 1
    b.offer(elements([(40, 1, 5, "a"), (120, 1, 6, "a")]))
    released = b.release()
    assert released.late["event_time_ms"].tolist() == [40]
    assert b.elements["event_time_ms"].tolist() == [120]


def test_buffer_state_survives_a_json_round_trip():
    b = buffer()
    b.offer(elements([(10, 0, 0, "a"), (5, 1, 1, "b")]))
    b.observe(TOPIC, 0, 7)
    copy = buffer()
    copy.load_json(b.to_json())
    pd.testing.assert_frame_equal(copy.elements, b.elements)
    assert copy.progress == b.progress


def test_buffer_refuses_to_grow_past_its_bound():
    b = buffer(max_rows=2)
    with pytest.raises(OrderingBufferFull):
        b.offer(elements([(1, 0, 0, "a"), (2, 0, 1, "a"), (3, 0, 2, "a")]))


def test_ewma_converts_to_fahrenheit_and_folds_in_the_given_order():
    state: dict = {}
    out = EwmaFahrenheit(alpha=0.5).fold(
        state, pd.DataFrame({"key": ["a", "a", "b"], "value": [0.0, 100.0, 10.0]})
    )
    assert out["ewma_f"].tolist() == [32.0, (212 + 32) / 2, 50.0]
    assert out["seq"].tolist() == [1, 2, 1]
    assert state == {"a": [(212 + 32) / 2, 2], "b": [50.0, 1]}
    again = EwmaFahrenheit(alpha=0.5).fold(state, pd.DataFrame({"key": ["a"], "value": [0.0]}))
    assert again["ewma_f"].tolist() == [(122 + 32) / 2] and again["seq"].tolist() == [3]


def test_config_names_the_bad_setting():
    with pytest.raises(ConfigError, match=r"ewma\.alpha"):
        EwmaFahrenheit(alpha=0)
    with pytest.raises(ConfigError, match=r"ordering\.partitions"):
        OrderingConfig(partitions=())


# -- the shard step under every batch plan ------------------------------------------------------

KEYS = ("s0", "s1", "s2")


def readings(per_partition: int):
    """Per partition, rows in offset order with non-decreasing event times."""
    parts = []
    for p in (0, 1):
        rows = []
        for o in range(per_partition):
            et = o * 20 + p * 7
            key = KEYS[(o + p) % len(KEYS)]
            rows.append((p, o, et, key, float((o * 13 + p * 5) % 11)))
        parts.append(rows)
    return parts


def progress(partition, event_time_ms):
    """A progress row of ``partition`` as mark_progress makes it (the other columns null)."""
    fixed = {"shard": 0, "kind": KIND_PROGRESS, "topic": TOPIC, "partition": partition}
    return dict.fromkeys(MARKED_SCHEMA.fieldNames()) | fixed | {"event_time_ms": event_time_ms}


def marked(rows, shards=1):
    """What mark_progress produces for a batch: the rows, then one progress row per partition."""
    frame = [
        {
            "shard": 0,
            "kind": KIND_ROW,
            "key": k,
            "record_id": f"{p}-{o}",
            "event_time_ms": et,
            "value": v,
            "topic": TOPIC,
            "partition": p,
            "offset": o,
        }
        for p, o, et, k, v in rows
    ]
    for p in sorted({r[0] for r in rows}):
        frame.append(progress(p, max(r[2] for r in rows if r[0] == p)))
    return pd.DataFrame(frame, columns=MARKED_SCHEMA.fieldNames())


def closing():
    return pd.DataFrame([progress(p, CLOSED) for p in (0, 1)], columns=MARKED_SCHEMA.fieldNames())


def run_plan(plan, buffered=True, ends=False):
    """Feed batches through a processor whose state is dumped and reloaded between batches."""
    config = OrderingConfig.for_topic(TOPIC, 2, shards=1, buffered=buffered)
    state = (None, None)
    outputs = []
    for batch in [*plan, "close"]:
        proc = ShardProcessor(config, None, 0, EwmaFahrenheit())
        proc.load(*state)
        if batch == "close":
            frame = closing()
            if ends:
                frame = pd.concat(
                    [frame, pd.DataFrame([{"shard": 0, "kind": KIND_END, "key": k} for k in KEYS])]
                )
        else:
            frame = marked(batch)
        outputs.append(proc.step(frame))
        state = proc.dump()
    out = pd.concat(outputs)
    return out[out["_kind"] == "new"].set_index("record_id")[["ewma_f", "seq"]].sort_index()


@st.composite
def batch_plans(draw):
    per_partition = draw(st.integers(4, 12))
    parts = readings(per_partition)
    cuts = [sorted(draw(st.lists(st.integers(0, per_partition), max_size=4))) for _ in parts]
    plan = []
    bounds = [[0, *c, per_partition] for c in cuts]
    n_batches = max(len(b) for b in bounds) - 1
    for i in range(n_batches):
        rows = []
        for p, b in enumerate(bounds):
            lo, hi = b[min(i, len(b) - 2)], b[min(i + 1, len(b) - 1)]
            rows.extend(parts[p][lo:hi] if i < len(b) - 1 else [])
        rows = draw(st.permutations(rows))  # arrival order after the shuffle: anything
        plan.append(list(rows))
    return per_partition, plan


@settings(max_examples=40, deadline=None)
@given(batch_plans())
def test_buffered_fold_is_the_same_under_every_batch_plan_and_arrival_order(case):
    per_partition, plan = case
    reference = run_plan([[r for part in readings(per_partition) for r in part]])
    assert len(reference) == 2 * per_partition
    pd.testing.assert_frame_equal(run_plan(plan), reference)


def test_unbuffered_fold_depends_on_arrival_order():
    parts = readings(6)
    in_order = sorted(parts[0] + parts[1], key=lambda r: r[2])
    one_partition_first = parts[0] + parts[1]
    a = run_plan([in_order], buffered=False)
    b = run_plan([one_partition_first], buffered=False)
    assert not a.equals(b)
    # and the buffer repairs it
    pd.testing.assert_frame_equal(
        run_plan([in_order], buffered=True), run_plan([one_partition_first], buffered=True)
    )


def test_end_events_flush_and_drop_fold_state():
    parts = readings(5)
    out = run_plan([parts[0] + parts[1]], ends=True)
    assert len(out) == 10
    # Closing the partitions releases everything but keeps each key's fold; the end events
    # are what drop it.
    config = OrderingConfig.for_topic(TOPIC, 2, shards=1)
    for ends, folds_left in ((False, set(KEYS)), (True, set())):
        proc = ShardProcessor(config, None, 0, EwmaFahrenheit())
        proc.step(marked(parts[0] + parts[1]))
        assert set(proc.fold_state) == set(KEYS)
        end_rows = pd.DataFrame([{"shard": 0, "kind": KIND_END, "key": k} for k in KEYS])
        proc.step(pd.concat([closing(), end_rows]) if ends else closing())
        assert set(proc.fold_state) == folds_left
