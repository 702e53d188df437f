"""The storage layer's file operations and typed errors on the local S3 store (pyarrow)."""

from __future__ import annotations

import re
import time
from dataclasses import replace

import pytest

from spark_ext import storage
from spark_ext.storage import (
    AccessDenied,
    BucketNotFound,
    EndpointUnreachable,
    Location,
    StorageSettings,
)

pytestmark = pytest.mark.integration


def test_write_read_list_delete_round_trip(s3_root: Location, s3_settings: StorageSettings) -> None:
    a, b = s3_root.join("state", "a.bin"), s3_root.join("state", "sub", "b.bin")
    storage.write_bytes(a, b"first", s3_settings)
    storage.write_bytes(b, b"x" * 1000, s3_settings)
    storage.write_bytes(a, b"second", s3_settings)  # replaced whole

    assert storage.exists(a, s3_settings)
    assert storage.read_bytes(a, s3_settings) == b"second"
    assert storage.list_prefix(s3_root.join("state"), s3_settings) == ["a.bin", "sub/b.bin"]
    assert storage.file_sizes(s3_root.join("state"), s3_settings) == {"a.bin": 6, "sub/b.bin": 1000}

    storage.delete(a, s3_settings)
    assert not storage.exists(a, s3_settings)
    storage.delete(s3_root, s3_settings)
    assert storage.list_prefix(s3_root, s3_settings) == []
    storage.delete(s3_root, s3_settings)  # nothing there: no error


def test_missing_object_reads_as_file_not_found(
    s3_root: Location, s3_settings: StorageSettings
) -> None:
    with pytest.raises(FileNotFoundError):
        storage.read_bytes(s3_root.join("none"), s3_settings)
    assert storage.list_prefix(s3_root.join("none"), s3_settings) == []


def test_uri_forms_name_the_same_object(s3_root: Location, s3_settings: StorageSettings) -> None:
    storage.write_bytes(f"s3a://{s3_root.bucket}/{s3_root.path}/f", b"1", s3_settings)
    assert storage.read_bytes(f"s3://{s3_root.bucket}/{s3_root.path}/f", s3_settings) == b"1"


def test_missing_bucket_is_a_typed_error(s3_settings: StorageSettings) -> None:
    with pytest.raises(BucketNotFound, match="no-such-bucket"):
        storage.check("s3a://no-such-bucket/t", s3_settings)
    with pytest.raises(BucketNotFound, match="no-such-bucket"):
        storage.list_prefix("s3a://no-such-bucket/t", s3_settings)  # not an empty listing


def test_wrong_credentials_are_a_typed_error(
    s3_root: Location, s3_settings: StorageSettings
) -> None:
    wrong = replace(s3_settings, secret_access_key="not-the-secret")
    with pytest.raises(AccessDenied, match=re.escape(str(s3_root))):
        storage.check(s3_root, wrong)
    with pytest.raises(AccessDenied):
        storage.write_bytes(s3_root.join("f"), b"1", wrong)
    assert "not-the-secret" not in repr(wrong)


def test_endpoint_that_does_not_answer_fails_fast(s3_root: Location) -> None:
    from tests.conftest import free_ports

    nobody = StorageSettings(
        endpoint=f"http://127.0.0.1:{free_ports(1)[0]}", access_key_id="a", secret_access_key="b"
    )
    started = time.monotonic()
    with pytest.raises(EndpointUnreachable, match=r"no answer from http://127\.0\.0\.1"):
        storage.check(s3_root, nobody)
    with pytest.raises(EndpointUnreachable):
        storage.read_bytes(s3_root.join("f"), nobody)
    assert time.monotonic() - started < 5
