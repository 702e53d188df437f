"""The driver path's state: per batch id, a replay of N starts from N-1's (invariant 2); its
size in open (window, key) groups; the path setting."""

from __future__ import annotations

import pytest

from spark_ext.errors import ConfigError
from spark_ext.operators import Count, WindowAggregate
from spark_ext.streaming import Closing
from spark_ext.streaming.batch import BatchState
from spark_ext.streaming.driver import StateLog, check_path
from spark_ext.streaming.tester import PipelineTester
from spark_ext.tracker import Tumbling


def new_tester() -> PipelineTester:
    return PipelineTester(
        WindowAggregate(Count()),
        Tumbling("10 seconds", namespace="w"),
        Closing.partitions("src", 2, ordered=False),
    )


def rows(first: int, n: int, keys: int) -> list[dict]:
    return [
        {"partition": i % 2, "offset": first + i, "key": f"k{i % keys}", "event_time_ms": i * 700}
        for i in range(n)
    ]


def test_a_replay_of_batch_n_starts_from_the_state_of_batch_n_minus_1(tmp_path):
    log = StateLog(str(tmp_path / "chk"))
    assert log.before(0).stores == {}
    t = new_tester()
    saved = []
    for batch in range(3):
        t.run_batch(rows(batch * 30, 30, 3))
        log.save(batch, t.state)
        saved.append(t.state.to_json())
    assert log.before(2).to_json() == saved[1]  # not batch 2's own, written before a crash
    assert log.before(3).to_json() == saved[2]
    assert sorted(p.name for p in (tmp_path / "chk" / "tracked_driver").iterdir()) == [
        f"{1:020d}.json",
        f"{2:020d}.json",
    ]


def test_the_state_counts_open_window_key_groups_and_round_trips():
    t = new_tester()
    t.run_batch(rows(0, 30, 3))  # 0-20.3 s of event time, no marker: three windows open
    state = t.state
    assert state.open_keys(t.operator) == 7  # keys k0-k2 in the first two, k2 in the third
    again = BatchState.from_json(state.to_json())
    assert again.to_json() == state.to_json()
    assert again.open_keys(t.operator) == 7
    t.run_batch([{"partition": p, "offset": 100 + p, "close": 20_000} for p in range(2)])
    assert t.state.open_keys(t.operator) == 1  # the two closed windows released


def test_an_unknown_path_is_a_typed_error():
    assert check_path("driver") == "driver"
    with pytest.raises(ConfigError, match="'driver' or 'distributed'"):
        check_path("jvm")
