"""Bad object-storage input at a job's start (issue #26, "Done when"): a bucket that does not
exist, refused credentials, an endpoint that does not answer. Each is a typed one-line error
naming the location, raised by the job's start before any JVM (``storage.check`` in
:func:`jobs.startup.start_job`), within seconds: no retry loop, no Java trace."""

from __future__ import annotations

import socket
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from jobs import dedup_delta, exactly_once_delta
from spark_ext.config import CONF_DIR, load_profile
from spark_ext.storage import AccessDenied, BucketNotFound, EndpointUnreachable, StorageError
from tests.conftest import unique_topic
from tests.connectors.s3.conftest import s3_settings, s3_store  # noqa: F401 (fixtures)

pytestmark = pytest.mark.integration

#: Seconds a refused start may take: the store's answer, or the 3 s connect timeout.
BOUND_S = 8.0


@pytest.fixture(scope="module")
def topic(kafka_bootstrap: str) -> str:
    """An input topic that exists (the jobs' input checks pass: only the storage is bad)."""
    return unique_topic(kafka_bootstrap, "s3-bad-input")


def profile_with(tmp_path: Path, **storage: str) -> str:
    """A copy of the ``test`` profile whose ``[storage]`` is conf/s3.toml's with ``storage``."""
    settings = {**vars(load_profile("s3").storage), **storage}
    section = "\n".join(f'{k} = "{v}"' for k, v in settings.items())
    path = tmp_path / "bad.toml"
    path.write_text(f"{(CONF_DIR / 'test.toml').read_text()}\n[storage]\n{section}\n")
    return str(path)


def refused(main: Callable[[list[str]], int], argv: list[str]) -> tuple[StorageError, float]:
    start = time.monotonic()
    with pytest.raises(StorageError) as info:
        main(argv)
    return info.value, time.monotonic() - start


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def eo_args(root: str, profile: str, topic: str) -> list[str]:
    table, checkpoint = f"{root}/events", f"{root}/_chk"
    flags = ["--table", table, "--checkpoint", checkpoint, "--sink-id", "events"]
    return ["--profile", profile, "--topic", topic, *flags]


def test_a_missing_bucket_stops_the_job_at_start_naming_it(
    s3_store,  # noqa: F811
    topic: str,
) -> None:
    out = ["--out", "s3a://no-such-bucket-26/dedup"]
    argv = ["--profile", "test", "--storage", "s3", "--topic", topic, *out]
    error, seconds = refused(dedup_delta.main, argv)
    assert isinstance(error, BucketNotFound)
    assert "s3://no-such-bucket-26/dedup" in str(error) and "\n" not in str(error)
    assert seconds < BOUND_S


def test_refused_credentials_stop_the_job_at_start_naming_the_location(
    s3_store,  # noqa: F811
    tmp_path: Path,
    topic: str,
) -> None:
    profile = profile_with(tmp_path, secret_access_key="not-the-secret")
    argv = eo_args("s3a://spark-ext/bad", profile, topic)
    error, seconds = refused(exactly_once_delta.main, argv)
    assert isinstance(error, AccessDenied)
    assert str(error).startswith("s3://spark-ext/bad/") and "\n" not in str(error)
    assert seconds < BOUND_S


def test_an_endpoint_that_does_not_answer_stops_the_job_at_start(
    tmp_path: Path, topic: str
) -> None:
    endpoint = f"http://127.0.0.1:{free_port()}"
    profile = profile_with(tmp_path, endpoint=endpoint)
    argv = eo_args("s3a://spark-ext/bad", profile, topic)
    error, seconds = refused(exactly_once_delta.main, argv)
    assert isinstance(error, EndpointUnreachable)
    assert str(error) == f"s3://spark-ext/bad/events: no answer from {endpoint}"
    assert seconds < BOUND_S


def test_an_endpoint_that_accepts_but_never_answers_stops_the_job_within_the_probes_bound(
    tmp_path: Path, topic: str
) -> None:
    with socket.socket() as hung:  # connections queue in its backlog, nothing reads them
        hung.bind(("127.0.0.1", 0))
        hung.listen(8)
        endpoint = f"http://127.0.0.1:{hung.getsockname()[1]}"
        profile = profile_with(tmp_path, endpoint=endpoint)
        argv = eo_args("s3a://spark-ext/bad", profile, topic)
        error, seconds = refused(exactly_once_delta.main, argv)
    assert isinstance(error, EndpointUnreachable), error
    assert seconds < 10 + BOUND_S  # the probe's 10 s; before: the operations' 30 s (32 s)
