"""Fixtures of the state store tests: the count-per-key query's shape and a run that never crashed."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from scripts.benchmarks.state_store import run_queries
from spark_ext.config import STATE_STORES


@dataclass(frozen=True)
class CountQueryShape:
    """How the tests run :mod:`scripts.benchmarks.state_store`'s count-per-key query."""

    stores: tuple[str, ...] = tuple(sorted(STATE_STORES))
    keys: int = 300  # the fill batch 0 holds every key once
    rows_per_batch: int = 100  # later batches update a rolling window of 100 keys
    final_batch: int = 6
    #: The queries stop when a listener sees ``final_batch`` committed; listener events can lag
    #: on a busy shared session, and a query may run on. Every batch's rows are pinned by the
    #: offset log, so that changes no state, but Spark must not purge the batches the tests read.
    retain: str = "spark.sql.streaming.minBatchesToRetain=100000"
    #: One batch per interval: the stores advance in step, so the kill after every store has
    #: committed the crash batch lands before any of them reached ``final_batch``.
    interval: str = "1 second"

    def conf(self) -> dict[str, str]:
        key, _, value = self.retain.partition("=")
        return {key: value}


@pytest.fixture(scope="session")
def shape() -> CountQueryShape:
    return CountQueryShape()


@contextlib.contextmanager
def state_store_conf_restored(spark: SparkSession) -> Iterator[SparkSession]:
    """Put the shared session's state store settings back as they were after the block."""
    keys = sorted({key for settings in STATE_STORES.values() for key in settings})
    saved = {key: spark.conf.get(key, None) for key in keys}
    try:
        yield spark
    finally:
        for key, value in saved.items():
            if value is None:
                spark.conf.unset(key)
            else:
                spark.conf.set(key, value)


@pytest.fixture(scope="session")
def never_crashed(
    tmp_path_factory: pytest.TempPathFactory, spark: SparkSession, shape: CountQueryShape
) -> Path:
    """Checkpoints (one per store, ``<root>/<store>``) of the query run in-process to
    ``shape.final_batch`` without a crash."""
    root = tmp_path_factory.mktemp("never_crashed")
    with state_store_conf_restored(spark):
        run_queries(
            spark,
            shape.stores,
            root,
            shape.keys,
            shape.rows_per_batch,
            shape.final_batch,
            timeout_s=600,
            conf=shape.conf(),
        )
    return root
