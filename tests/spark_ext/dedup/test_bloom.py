"""Bloom filter properties: no false negatives, false-positive rate near (1 - e^(-kn/m))^k."""

from __future__ import annotations

import math
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from spark_ext.dedup.filters import (
    BloomFilter,
    BloomFormatError,
    RotatingBloom,
    expected_fp_rate,
    optimal_parameters,
)
from spark_ext.errors import ConfigError
from spark_ext.hashing import stable_hash64

keys_strategy = st.lists(st.text(min_size=0, max_size=30), min_size=1, max_size=300)


@settings(max_examples=60, deadline=None)
@given(keys=keys_strategy, bits=st.integers(1, 64), hashes=st.integers(1, 12))
def test_added_keys_are_never_reported_absent(keys, bits, hashes):
    f = BloomFilter(bits * 8, hashes)
    f.add(keys[: len(keys) // 2])
    f.add(keys[len(keys) // 2 :])
    assert f.contains(keys).all()


@settings(max_examples=25, deadline=None)
@given(
    n=st.integers(200, 3000),
    bits_per_key=st.floats(2.0, 14.0),
    hashes=st.integers(1, 8),
    seed=st.integers(0, 2**31),
)
@example(n=200, bits_per_key=4.4375, hashes=8, seed=409)  # off the formula by 2 of its sd
def test_false_positive_rate_is_near_the_formula(n, bits_per_key, hashes, seed):
    m = max(64, int(n * bits_per_key) // 8 * 8)
    f = BloomFilter(m, hashes)
    rng = np.random.default_rng(seed)
    inserted = [f"in-{seed}-{i}" for i in range(n)]
    f.add(inserted)
    probes = 20_000
    absent = [f"out-{seed}-{i}-{rng.integers(1 << 30)}" for i in range(probes)]
    observed = float(f.contains(absent).mean())
    # The formula is (expected fill)^k; one filter's own fill varies around the expected one
    # by about sqrt(q (1 - q) / m) (880 bits, 8 hashes, 200 keys: 0.29 +- 0.03), so the probes
    # are checked against this filter's fill and the fill against the formula's.
    fill = float(np.unpackbits(f.bits).mean())
    q = 1.0 - math.exp(-hashes * n / m)
    assert abs(fill - q) <= 5 * math.sqrt(q * (1 - q) / m) + 1e-3, (fill, q)
    expected = fill**hashes
    assert expected_fp_rate(m, hashes, n) == pytest.approx(q**hashes)
    # Binomial noise of the probes plus the independence the formula assumes of the positions.
    tolerance = 5 * math.sqrt(expected * (1 - expected) / probes) + 0.1 * expected + 1e-3
    assert abs(observed - expected) <= tolerance, (observed, expected)


def test_sized_filter_meets_configured_false_positive_rate():
    f = BloomFilter.for_capacity(50_000, fp_rate=0.01)
    f.add([f"k{i}" for i in range(50_000)])
    observed = float(f.contains([f"z{i}" for i in range(100_000)]).mean())
    assert observed <= 0.01 * 1.5
    assert f.expected_fp_rate() == pytest.approx(0.01, rel=0.1)


def test_add_reports_keys_seen_in_earlier_calls_only():
    f = BloomFilter.for_capacity(100, 0.001)
    assert f.add(["a", "b", "a"]).tolist() == [False, False, False]
    assert f.add(["a", "c"]).tolist() == [True, False]
    assert f.count == 4


def test_hash_is_stable_across_processes():
    keys = ["sensor-1/42", "", "ünïcode", "x" * 100]
    here = stable_hash64(keys).tolist()
    code = f"from spark_ext.hashing import stable_hash64;print(stable_hash64({keys!r}).tolist())"
    for seed in ("1", "2"):
        out = subprocess.run(
            [sys.executable, "-c", code],
            capture_output=True,
            text=True,
            check=True,
            env={"PYTHONHASHSEED": seed, "PATH": ""},
            cwd=str(__import__("pathlib").Path(__file__).resolve().parents[2]),
        ).stdout
        assert eval(out) == here


def test_filter_round_trips_through_bytes():
    f = BloomFilter.for_capacity(1000, 0.01)
    f.add([str(i) for i in range(500)])
    g = BloomFilter.from_bytes(f.to_bytes())
    assert g == f
    with pytest.raises(BloomFormatError):
        BloomFilter.from_bytes(b"nonsense" * 10)


def test_optimal_parameters_follow_the_textbook_formulas():
    m, k = optimal_parameters(1_000_000, 0.01)
    assert m == pytest.approx(9_585_059, rel=1e-4)
    assert k == 7
    with pytest.raises(ConfigError, match="fp_rate"):
        optimal_parameters(10, 1.5)
    with pytest.raises(ConfigError, match="capacity"):
        optimal_parameters(0, 0.01)


def test_rotating_bloom_forgets_generations_older_than_its_window():
    r = RotatingBloom(capacity=1000, fp_rate=0.001, rotation_ms=1000, generations=2)
    h = stable_hash64(["a", "b"])
    assert r.check_and_add(h, np.array([100, 1500])).tolist() == [False, False]
    assert set(r.filters) == {0, 1}
    # Generation 2 arrives: generation 0 ("a") is dropped, "b" (generation 1) is kept.
    assert r.check_and_add(stable_hash64(["c"]), np.array([2100])).tolist() == [False]
    assert set(r.filters) == {1, 2}
    assert r.check_and_add(stable_hash64(["b"]), np.array([2200])).tolist() == [True]
    # A key older than the kept window cannot be ruled out: "maybe".
    assert r.check_and_add(stable_hash64(["zz"]), np.array([50])).tolist() == [True]
    copy = RotatingBloom(capacity=1000, fp_rate=0.001, rotation_ms=1000, generations=2)
    copy.load_bytes(r.to_bytes())
    assert copy.filters == r.filters
    assert copy.nbytes == r.nbytes > 0


def test_filters_loaded_under_another_capacity_still_never_miss_their_keys():
    """State saved with one capacity and loaded by a config with another: each generation's
    filter is asked with its own bit positions, so keys it holds are never reported absent."""
    keys = stable_hash64([f"k{i}" for i in range(500)])
    old = RotatingBloom(capacity=100, fp_rate=0.01, rotation_ms=1000, generations=2)
    old.check_and_add(keys, np.zeros(len(keys), dtype=np.int64))
    resized = RotatingBloom(capacity=100_000, fp_rate=0.001, rotation_ms=1000, generations=2)
    resized.load_bytes(old.to_bytes())
    # Generation 1 gets a new, larger filter; generation 0 (the loaded one) is still kept.
    assert resized.check_and_add(keys, np.full(len(keys), 1500, dtype=np.int64)).all()
    assert {f.num_bits for f in resized.filters.values()} == {
        old.filters[0].num_bits,
        BloomFilter.for_capacity(100_000, 0.001).num_bits,
    }
