"""DedupMetrics: counters add up over batches, gauges (state size, buffered rows) do not."""

from __future__ import annotations

import pytest

from spark_ext.dedup import DedupMetrics


def test_run_total_sums_counters_and_keeps_the_latest_gauges():
    first = DedupMetrics(rows=10, bloom_negative=8, state_bytes=1_000, buffered_rows=5)
    later = DedupMetrics(rows=7, bloom_negative=7, state_bytes=1_200, buffered_rows=2)
    total = first + later
    assert total.rows == 17 and total.bloom_negative == 15
    assert total.state_bytes == 1_200, "state size after the later batch, not a sum"
    assert total.buffered_rows == 2, "rows buffered after the later batch, not a sum"


def test_metrics_of_one_batch_sum_the_state_of_its_buckets():
    buckets = [
        DedupMetrics(rows=3, state_bytes=100, buffered_rows=1, newest_generation=4),
        DedupMetrics(rows=4, state_bytes=150, buffered_rows=2, newest_generation=5),
    ]
    batch = DedupMetrics.of_buckets(buckets)
    assert batch.rows == 7
    assert batch.state_bytes == 250 and batch.buffered_rows == 3
    assert batch.newest_generation == 5


def test_run_total_of_no_batch_is_empty():
    assert DedupMetrics.of_buckets([]) == DedupMetrics()
    total = DedupMetrics() + DedupMetrics(rows=2, late_rows=1)
    assert total.late_rows == 1
    assert DedupMetrics.from_json(total.to_json()) == total
    assert total.lookups_avoided == pytest.approx(0.0)
