"""XOR labels and report aggregation: property tests (hypothesis), no Spark."""

from __future__ import annotations

import itertools
import random

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from spark_ext.tracker.agent import TrackerState
from spark_ext.tracker.labels import label_of, labels_of
from spark_ext.tracker.reports import TaskReport, batch_reports
from spark_ext.tracker.substreams import Sliding, Tumbling

coords = st.tuples(st.sampled_from(["a", "b", "orders"]), st.integers(0, 7), st.integers(0, 10**9))


def test_label_is_a_pure_function_of_source_coordinates():
    # The scalar and the vectorised paths agree (the pinned value below fixes both in time).
    assert label_of("orders", 3, 17) == int(labels_of(["orders"], np.array([3]), np.array([17]))[0])
    assert label_of("orders", 3, 17) != label_of("orders", 3, 18)
    assert label_of("orders", 3, 17) != label_of("orders", 4, 17)
    assert label_of("orders", 3, 17) != label_of("order", 3, 17)
    # Pinned value: a label must not change between releases (replays span upgrades).
    assert label_of("orders", 0, 0) == 114730366521622593
    many = labels_of(["t"] * 10_000, np.zeros(10_000), np.arange(10_000))
    assert len(set(many.tolist())) == 10_000


@settings(deadline=None)
@given(st.lists(coords, max_size=60))
def test_vectorised_labels_match_single_labels(cs):
    vec = labels_of([c[0] for c in cs], [c[1] for c in cs], [c[2] for c in cs]) if cs else []
    assert [int(x) for x in vec] == [label_of(*c) for c in cs]


def _split(items, cuts):
    cuts = sorted(set(c % (len(items) + 1) for c in cuts))
    bounds = [0, *cuts, len(items)]
    return [items[a:b] for a, b in itertools.pairwise(bounds)]


@settings(max_examples=100, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(0, 50_000), st.integers(0, 3), st.integers(0, 500)),
        min_size=1,
        max_size=80,
        unique_by=lambda r: (r[1], r[2]),
    ),
    st.lists(st.integers(0, 100), max_size=5),
    st.lists(st.integers(0, 100), max_size=5),
    st.integers(0, 2**32),
)
def test_sent_and_finished_reports_cancel_however_tasks_split_them(
    rows, send_cuts, recv_cuts, seed
):
    """Sliding windows: each element is in 2 substreams; senders and receivers group the
    elements differently (tasks, shards, batches); per substream the XORs cancel and the
    counts balance, in any merge order."""
    w = Sliding("10 seconds", "5 seconds", namespace="s")
    labels = labels_of(["t"] * len(rows), [r[1] for r in rows], [r[2] for r in rows])
    idx, starts, ends = w.assign(np.asarray([r[0] for r in rows], dtype=np.int64))
    members = [
        (f"s/{s}/{e}", int(labels[i]), int(e)) for i, s, e in zip(idx, starts, ends, strict=True)
    ]

    reports = []
    for part, chunk in enumerate(_split(members, send_cuts)):
        b = TaskReport("assign", part)
        b.add_labels(
            [m[0] for m in chunk], [m[1] for m in chunk], sent=True, ends=[m[2] for m in chunk]
        )
        reports.append(b)
    shuffled = list(members)
    random.Random(seed).shuffle(shuffled)
    for part, chunk in enumerate(_split(shuffled, recv_cuts)):
        b = TaskReport("operator", part % 2)  # several pieces per task: merged by key
        b.add_labels([m[0] for m in chunk], [m[1] for m in chunk], sent=False)
        reports.append(b)
    random.Random(seed + 1).shuffle(reports)

    state = TrackerState()
    state.accept(batch_reports("q", 0, reports))
    assert all(x == 0 for x in state.xors.values())
    assert all(c == 0 for c in state.counts.values())
    assert set(state.ends) == {m[0] for m in members}


@settings(deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(0, 30_000), st.integers(0, 999)),
        min_size=2,
        max_size=40,
        unique_by=lambda r: r[1],
    ),
    st.data(),
)
def test_a_lost_element_keeps_its_substream_open(rows, data):
    w = Tumbling("10 seconds", namespace="w")
    labels = labels_of(["t"] * len(rows), [0] * len(rows), [r[1] for r in rows])
    _, starts, ends = w.assign(np.asarray([r[0] for r in rows], dtype=np.int64))
    subs = [f"w/{s}/{e}" for s, e in zip(starts, ends, strict=True)]
    lost = data.draw(st.integers(0, len(rows) - 1))
    sent = TaskReport("assign", 0)
    sent.add_labels(subs, labels, sent=True, ends=ends)
    got = TaskReport("operator", 0)
    keep = [i for i in range(len(rows)) if i != lost]
    got.add_labels([subs[i] for i in keep], [labels[i] for i in keep], sent=False)
    state = TrackerState()
    state.declare("w", ["t:0"])
    progress = TaskReport("assign", 1)
    progress.add_progress("t:0", 10**9)
    state.accept(batch_reports("q", 0, [sent, got, progress]))
    ended = {e.substream for e in state.settle()}
    assert subs[lost] not in ended
    assert state.xors[subs[lost]] == int(labels[lost]) and state.counts[subs[lost]] == 1


@settings(deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["w/0/10", "w/10/20", "v/0/5"]), st.integers(-(2**63), 2**63 - 1)
        ),
        max_size=30,
    )
)
def test_task_report_merge_is_order_independent_and_round_trips_json(items):
    parts = []
    for i, (s, label) in enumerate(items):
        r = TaskReport("assign", 0, xors={s: label}, counts={s: 1}, progress={"t:0": i})
        parts.append(r)
    if not parts:
        return
    fwd = parts[0]
    for p in parts[1:]:
        fwd = fwd.merge(p)
    back = parts[-1]
    for p in reversed(parts[:-1]):
        back = back.merge(p)
    assert fwd == back
    assert TaskReport.from_json(fwd.to_json()) == fwd


@settings(deadline=None)
@given(
    st.lists(st.integers(0, 5), min_size=1, max_size=20),
    st.lists(st.integers(0, 5), max_size=20),
)
def test_a_report_key_is_applied_once_however_often_it_is_resent(batches, resend):
    """Replayed batches re-send the same (query, batch, stage, partition): applied once."""

    def report(batch):
        b = TaskReport("assign", 0)
        b.add_labels(["w/0/10"], [batch + 1], sent=True, ends=[10])
        return batch_reports("q", batch, [b])[0]

    order = sorted(set(batches))
    once = TrackerState()
    once.accept([report(b) for b in order])
    noisy = TrackerState()
    for b in order:
        noisy.accept([report(b)])
        noisy.accept([report(r) for r in resend if r <= b])  # replays of applied batches
    assert noisy.xors == once.xors and noisy.counts == once.counts
