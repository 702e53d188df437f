"""The at-least-once job's EWMA fold (pure): events in (event_time, event_id) order onto the
user's state, with the one EWMA of the project (spark_ext.operators.ewma.ewma)."""

from __future__ import annotations

import pandas as pd
import pytest

from jobs.at_least_once import fold_ewma


def rows(state, events):
    frame = [{"kind": 0, "user_id": "u", "ewma": state[0], "events": state[1]}] if state else []
    frame += [
        {"kind": 1, "user_id": "u", "amount": a, "event_time": t, "event_id": i}
        for a, t, i in events
    ]
    return pd.DataFrame(frame)


def test_events_fold_in_event_time_order_onto_the_state():
    out = fold_ewma(rows((10.0, 2), [(20.0, 2, "b"), (0.0, 1, "a")]), alpha=0.5)
    # a first: 0.5 * 0 + 0.5 * 10 = 5; then b: 0.5 * 20 + 0.5 * 5 = 12.5
    assert out.to_dict("records") == [{"user_id": "u", "ewma": 12.5, "events": 4}]


def test_first_event_of_a_user_seeds_the_average():
    out = fold_ewma(rows(None, [(7.0, 1, "x"), (9.0, 2, "y")]), alpha=0.25)
    assert out["ewma"].iloc[0] == pytest.approx(0.25 * 9 + 0.75 * 7)
    assert out["events"].iloc[0] == 2
