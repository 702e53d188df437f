"""Executors on hosts of their own (scripts/cluster.py ``--isolated``): no task reads what the
driver wrote locally, the two-phase Delta sink with its table on S3 writes what local mode
writes, and the exactly-once Kafka -> Kafka job gives local mode's output under a host lost
mid-batch and a host cut from the broker (docs/design.md, "Isolated hosts")."""

from __future__ import annotations

import json
import uuid

import pytest
from deltalake import DeltaTable

from connectors.demo_events import produce_events
from connectors.kafka import create_topic
from connectors.sinks import Trigger, exactly_once_to_delta
from jobs import registry
from jobs.exactly_once_delta import events_stream
from spark_ext import storage
from spark_ext.jobrun import REPO, run_job
from spark_ext.recovery import FaultClass, RecoveryHarness, network
from spark_ext.recovery.matrix import CellStatus, format_matrix, run_plan
from spark_ext.recovery.profiles import derive_profile
from spark_ext.storage import Location
from tests.cluster.conftest import HOSTS
from tests.conftest import await_done

EVENTS = 200
COLUMNS = ["event_id", "user_id", "amount", "event_time", "topic", "partition", "offset"]

pytestmark = pytest.mark.integration


def test_no_task_reads_the_drivers_files_and_delta_two_phase_on_s3_equals_local_mode(
    isolated, spark, tmp_path
):
    """One driver on the cluster: tasks on every host, none sees the file the driver just
    wrote locally, and the two-phase Delta sink (tasks stage Parquet on the store, the driver
    commits) writes the table local mode writes from the same topic."""
    topic = f"cluster-{uuid.uuid4().hex[:8]}"
    create_topic(isolated.bootstrap, topic, 3)
    produce_events(isolated.bootstrap, topic, EVENTS, malformed_every=20)
    bucket = isolated.store.bucket
    on_cluster, local = (Location(bucket, f"tests/{uuid.uuid4().hex[:12]}/{n}") for n in "cl")
    driver_file = tmp_path / "driver-only.txt"
    args = ["--profile", isolated.profile, "--file", str(driver_file), "--topic", topic]
    args += ["--table", storage.spark_uri(on_cluster), "--checkpoint", str(tmp_path / "chk")]
    run = run_job("tests.cluster._cluster_job", args, cwd=REPO, timeout_s=600)
    assert run.ok, run.output_tail[-3000:]
    probe = json.loads(run.output_tail.split("PROBE ", 1)[1].splitlines()[0])
    # Tasks ran on every worker host, and on none of them did the driver's file exist.
    hosts = [network.host_address(i) for i in range(HOSTS)]
    assert probe["seen"] == [[h, False] for h in hosts]
    assert probe["read"] == "failed: FileNotFoundError"
    assert probe["driver"] == "written by the driver"

    # The same pipeline in local mode (this test run's session), on the same topic.
    settings = isolated.store.settings()
    query = exactly_once_to_delta(
        events_stream(spark, isolated.bootstrap, topic, None),
        storage.spark_uri(local),
        sink_id="events",
        checkpoint=tmp_path / "local-chk",
        trigger=Trigger(available_now=True),
        storage=settings,
    )
    await_done(query, 600)
    assert query.exception() is None
    tables = []
    for table in (on_cluster, local):
        uri, options = storage.delta_storage(table, settings)
        frame = DeltaTable(uri, storage_options=options).to_pandas(columns=COLUMNS)
        tables.append(frame.sort_values(["partition", "offset"]).reset_index(drop=True))
    assert len(tables[0]) == EVENTS
    assert tables[0].equals(tables[1])


@pytest.mark.timeout(1800)  # three job runs and a host restart: 506 s at load 30
def test_host_loss_and_partition_leave_the_kafka_job_precise_and_live(isolated, tmp_path):
    """Clean run in local mode (``O_e``); faulted run and restart on the cluster: ``precise``
    is local mode's output, after a host lost inside a transaction and a host cut from the
    broker for 10 s, each followed by a committed batch within the job's bound."""
    local = derive_profile("faults", tmp_path / "local.toml", bootstrap=isolated.bootstrap)
    harness = RecoveryHarness(
        tmp_path / "matrix",
        isolated.bootstrap,
        profile=str(local),
        timeout_s=600,
        hosts=isolated,
    )
    faults = (FaultClass.HOST_LOSS, FaultClass.PARTITION)
    cells = run_plan(harness, [(registry.get("exactly_once_kafka"), faults)])
    print(format_matrix(cells))
    failed = {
        c.fault: c.error or c.observed for c in cells if c.status is not CellStatus.AS_EXPECTED
    }
    assert not failed, failed
    for c in cells:
        (result,) = c.results
        assert (
            result.run_seconds["liveness"]
            <= registry.get("exactly_once_kafka").cell(c.fault).bound_s
        )
        print(f"{c.fault}: {result.crash}: liveness {result.run_seconds['liveness']:.1f}s")
