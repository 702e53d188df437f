"""Fixtures of the state store tests."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager as ContextManager

import pytest
from pyspark.sql import SparkSession

from spark_ext.config import STATE_STORES


@contextlib.contextmanager
def _restored(spark: SparkSession) -> Iterator[SparkSession]:
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
def state_store_conf_restored(spark: SparkSession) -> Callable[[], ContextManager[SparkSession]]:
    """``with state_store_conf_restored(): ...`` puts the shared session's state store
    settings back as they were, whatever store the block applied."""
    return lambda: _restored(spark)
