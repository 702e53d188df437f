"""Shard keys spread the operator stage over every shuffle partition (pure, no Spark)."""

from __future__ import annotations

import pytest

from spark_ext.streaming.placement import shard_keys, spark_hash_int, spark_partition


def test_the_hash_is_sparks():
    # select hash(cast(id as int)), pmod(..., 2), pmod(..., 4) from range(8) on Spark 4.2
    assert [spark_partition(i, 2) for i in range(8)] == [1, 1, 0, 1, 0, 0, 1, 1]
    assert [spark_partition(i, 4) for i in range(8)] == [3, 3, 2, 3, 2, 2, 1, 3]
    # select hash(cast(v as int)) for these v on Spark 4.2 (Murmur3, seed 42)
    values = [0, -1, 1, 42, 2**31 - 1, -(2**31)]
    spark = [933211791, -1604776387, -559580957, 29417773, 133916647, 723455942]
    assert [spark_hash_int(v) for v in values] == spark


@pytest.mark.parametrize(("shards", "partitions"), [(2, 2), (4, 2), (3, 4), (8, 4), (5, 200)])
def test_shard_i_runs_in_partition_i_mod_p_under_a_key_of_its_own(shards, partitions):
    keys = shard_keys(shards, partitions)
    assert len(set(keys)) == shards and min(keys) >= 0
    assert [spark_partition(k, partitions) for k in keys] == [i % partitions for i in range(shards)]
    assert shard_keys(shards, partitions) == keys  # stable: the keys are state keys
