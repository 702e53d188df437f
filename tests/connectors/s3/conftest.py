"""Fixtures of the object-storage tests: the local S3 store (started here when it does not run)
and a fresh prefix in its bucket per test."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from connectors.s3.local_store import LocalS3Store, StoreConfig
from spark_ext import storage
from spark_ext.storage import Location, StorageSettings


@pytest.fixture(scope="session")
def s3_store() -> StoreConfig:
    """The local S3-API store, started if it does not answer yet."""
    store = LocalS3Store()
    store.start()
    return store.config


@pytest.fixture(scope="session")
def s3_settings(s3_store: StoreConfig) -> StorageSettings:
    return s3_store.settings()


@pytest.fixture
def s3_root(s3_store: StoreConfig, s3_settings: StorageSettings) -> Iterator[Location]:
    """A prefix of its own in the store's bucket, deleted after the test."""
    root = Location(s3_store.bucket, f"tests/{uuid.uuid4().hex[:12]}")
    yield root
    storage.delete(root, s3_settings)


@pytest.fixture
def s3_spark(spark, s3_settings: StorageSettings):
    """The test run's SparkSession reaching the local store through ``s3a://``."""
    for key, value in storage.hadoop_conf(s3_settings).items():
        spark.conf.set(key, value)
    return spark
