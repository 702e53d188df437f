"""Shared fixtures: one SparkSession for the whole run, the local Kafka broker, unique topics.

Integration tests use the real Spark, the real Apache Kafka broker (started here when it is
not running) and real Delta tables. Unit tests of pure logic do not touch these fixtures.
A test that uses one of :data:`INTEGRATION_FIXTURES` (directly or through another fixture) is
marked ``integration`` here, so ``pytest -m "not integration"`` is the fast lane of pure
logic. Tests marked ``heavy`` (beyond CI's budget) are deselected unless ``--heavy`` is given
or the ``-m`` expression names ``heavy`` (``-m heavy`` runs only them). :func:`await_done`
waits for a streaming query and fails the test if it did not end.
"""

from __future__ import annotations

import itertools
import logging
import os
import re
import socket
import uuid
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TYPE_CHECKING, TypeVar

import pytest

from connectors.kafka import create_topic
from connectors.kafka.local_broker import LocalKafkaBroker

if TYPE_CHECKING:
    from pyspark.sql.streaming import StreamingQuery

log = logging.getLogger(__name__)

T = TypeVar("T")

#: Fixtures that need Spark, the broker or job processes: a test using any is ``integration``.
INTEGRATION_FIXTURES = frozenset({"spark", "kafka_bootstrap", "new_topic", "job_env", "harness"})


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--heavy",
        action="store_true",
        help="also run the tests marked heavy (deselected by default: CI's 35-minute budget)",
    )


#: The slowest files (measured on 2 cores, longest first) run first: scripts/test.sh gives
#: xdist ``--dist loadfile --no-loadscope-reorder``, so a worker that takes one late does not
#: run on alone at the end while the other is idle.
RUN_FIRST = (
    "tests/spark_ext/recovery/test_campaign.py",
    # Not slow, but it waits for the isolated hosts' lock (tests/cluster/conftest.py) while
    # test_isolated_hosts.py runs on the other worker: 103 s idle once; first, it waits for none.
    "tests/cluster/test_leftovers.py",
    "tests/cluster/test_slow_link.py",  # the same
    "tests/jobs/test_readme_snippets.py",
    "tests/spark_ext/recovery/test_s3_cells.py",
    "tests/spark_ext/tracker/test_tracker_crash.py",
    "tests/jobs/test_ingest_crash.py",
    "tests/connectors/kafka/test_kafka_sliced.py",
    "tests/connectors/kafka/test_kafka_sliced_replay.py",
    "tests/scripts/test_standalone_cluster.py",
    "tests/connectors/kafka/test_sink_broker_restart.py",
    "tests/spark_ext/streaming/test_tracked_jitter_spark.py",
    "tests/jobs/test_notebooks.py",
    "tests/connectors/delta/test_dedup_sink_owner.py",
    "tests/spark_ext/tracker/test_tracker_two_queries.py",
    "tests/spark_ext/dedup/test_dedup_sink_txn_expiry.py",
    "tests/cluster/test_isolated_hosts.py",
    "tests/spark_ext/recovery/test_retention_and_disorder.py",
)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark every test that uses an integration fixture (closure included) ``integration``;
    deselect the ``heavy`` ones unless ``--heavy`` or an ``-m`` expression names them; the
    files of :data:`RUN_FIRST` first."""
    for item in items:
        if INTEGRATION_FIXTURES.intersection(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.integration)
    rank = {path: i for i, path in enumerate(RUN_FIRST)}
    items.sort(key=lambda item: rank.get(item.nodeid.split("::")[0], len(rank)))
    if config.getoption("heavy") or re.search(r"\bheavy\b", config.getoption("markexpr") or ""):
        return
    heavy = [item for item in items if item.get_closest_marker("heavy")]
    if heavy:
        config.hook.pytest_deselected(items=heavy)
        items[:] = [item for item in items if not item.get_closest_marker("heavy")]


def free_ports(n: int) -> list[int]:
    """``n`` distinct ports free on 127.0.0.1 right now (all bound at once, then released)."""
    socks = [socket.socket() for _ in range(n)]
    try:
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def await_done(query: StreamingQuery, timeout_s: float) -> None:
    """Wait for ``query`` to end; fail the test (and stop the query) if it is still running.

    ``StreamingQuery.awaitTermination(timeout)`` returns ``False`` on a timeout; a test that
    ignores it goes on to compare a half-written output and fails far from the cause.
    """
    if not query.awaitTermination(timeout_s):
        progress = query.lastProgress
        query.stop()
        pytest.fail(
            f"query {query.name or query.id} still running after {timeout_s}s "
            f"(last batch: {progress and progress.get('batchId')})"
        )


def start_selected(
    request: pytest.FixtureRequest, sequences: Mapping[str, Callable[[], T]], workers: int = 2
) -> dict[str, Future[T]]:
    """Start the job sequences of this module's selected tests, ``workers`` at a time.

    ``sequences`` maps a test function's name to what it runs (job processes only: killed,
    restarted, each on its own tables, checkpoints and topics). The test waits for its future
    and asserts on the result. Job processes spend much of their time starting a JVM and
    waiting, so two sequences at a time take less wall time on 2 cores than one after the
    other (measured idle: the sliced Kafka query's crash tests 120 s -> 74 s, the two-phase
    Delta ones 120 s -> 101 s); each test still runs the same jobs with the same faults.
    """
    selected = {
        getattr(item, "originalname", item.name)
        for item in request.session.items
        if item.module is request.module
    }
    pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="job-sequence")
    futures = {name: pool.submit(run) for name, run in sequences.items() if name in selected}
    pool.shutdown(wait=False)
    return futures


@pytest.fixture(scope="session")
def spark():
    """The one SparkSession of the test run (profile ``test``)."""
    from spark_ext.session import build_session

    session = build_session("test")
    yield session
    session.stop()


@pytest.fixture(scope="session")
def kafka_bootstrap() -> str:
    """Bootstrap servers of the local broker, started if it does not answer yet."""
    return LocalKafkaBroker().ensure_running()


_topic_counter = itertools.count()


def unique_topic(kafka_bootstrap: str, prefix: str = "t", partitions: int = 3) -> str:
    """Create a fresh, uniquely named topic (what :func:`new_topic` makes, for fixtures wider
    than one test)."""
    name = f"{prefix}-{os.getpid()}-{next(_topic_counter)}-{uuid.uuid4().hex[:6]}"
    create_topic(kafka_bootstrap, name, partitions)
    return name


@pytest.fixture
def new_topic(kafka_bootstrap: str) -> Callable[..., str]:
    """Create a fresh, uniquely named topic: ``new_topic("orders", partitions=3)``."""

    def make(prefix: str = "t", partitions: int = 3) -> str:
        return unique_topic(kafka_bootstrap, prefix, partitions)

    return make


@pytest.fixture
def readings_with_copies(
    kafka_bootstrap: str, new_topic: Callable[..., str]
) -> Callable[..., tuple[str, str, int]]:
    """Two 2-partition topics of ``jobs.ordering_dedup``'s sensor readings, the second with every
    ``every``-th reading twice (a producer retry, three records later in the same partition):
    ``readings_with_copies("dedup", sensors, per_sensor, every)`` -> (clean topic, topic with
    copies, records in it)."""
    from jobs.ordering_dedup import produce_readings

    def make(prefix: str, sensors: int, per_sensor: int, every: int) -> tuple[str, str, int]:
        clean = new_topic(f"{prefix}-clean", partitions=2)
        copies = new_topic(f"{prefix}-dups", partitions=2)
        produce_readings(kafka_bootstrap, clean, sensors=sensors, per_sensor=per_sensor)
        produced = produce_readings(
            kafka_bootstrap,
            copies,
            sensors=sensors,
            per_sensor=per_sensor,
            duplicate_every=every,
            duplicate_delay=3,
        )
        return clean, copies, produced

    return make


def kill_in_turn(module: str, args: list[str], kills: list[tuple[str, int]]) -> None:
    """Run job ``module`` once per ``(point@batch, max offsets per trigger)`` in ``kills``, each
    run from the checkpoint the last left; fail unless each was SIGKILLed at its point."""
    from spark_ext.jobrun import run_job

    for point, max_offsets in kills:
        run = run_job(
            module,
            [*args, "--max-offsets-per-trigger", str(max_offsets)],
            fault=point,
            timeout_s=600,
        )
        assert run.killed and run.fired(point.partition("@")[0], "kill"), (
            f"{point}: {run.output_tail}"
        )


@pytest.fixture
def job_env() -> Iterator[dict[str, str]]:
    """Environment for job subprocesses: this interpreter, loopback, no crash point."""
    from spark_ext.session import prepare_environment

    prepare_environment()
    env = {k: v for k, v in os.environ.items() if k != "SPARK_EXT_FAULT"}
    yield env


@pytest.fixture(autouse=True)
def _no_query_outlives_its_test() -> Iterator[None]:
    """Stop any streaming query a test left running on the shared session, so its batches and
    listener events do not load the tests after it."""
    yield
    from pyspark import SparkContext
    from pyspark.sql import SparkSession

    if SparkContext._active_spark_context is None:
        return
    session = SparkSession.getActiveSession()
    for query in session.streams.active if session else []:
        log.warning("query %s outlived its test; stopping it", query.name or query.id)
        query.stop()
