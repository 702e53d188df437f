"""An older driver's late progress commit never moves the sliced sink's record back
(issue #24, suspicion (b)).

A driver that lost contact (its tasks done, its step 4 under way) while a new driver started
from the same checkpoint: the new driver replays and records later batches, then the old one
finishes its step 4. Before, step 4 was a plain offset commit after a read: the old driver,
having read the record before the new start, wrote its lower batch over the new driver's.
"""

from __future__ import annotations

import threading
import uuid
from collections import Counter

import pyarrow as pa
import pytest

from connectors import kafka
from connectors.kafka.progress import SinkProgress
from connectors.kafka.settings import KafkaSinkSettings
from connectors.kafka.slices import SliceTransaction, record_batch, recover_slices
from spark_ext.sinks.errors import DriverFencedError

pytestmark = pytest.mark.integration


def arrow(batch_id: int, n: int = 5) -> pa.RecordBatch:
    return pa.RecordBatch.from_pydict(
        {
            "value": [f"b{batch_id}-{i}" for i in range(n)],
            "record_id": [f"in/{batch_id}/{i}" for i in range(n)],
        }
    )


def run_batch(settings: KafkaSinkSettings, batch_id: int, record: bool = True):
    with SliceTransaction(settings, 0) as tx:
        written = [tx.write(batch_id, iter([arrow(batch_id)]))]
    if record:
        record_batch(settings, batch_id, written)
    return written


def test_an_older_drivers_late_progress_commit_is_refused_and_moves_nothing_back(
    kafka_bootstrap, new_topic, monkeypatch
):
    topic = new_topic("old-driver", partitions=1)
    base = KafkaSinkSettings(kafka_bootstrap, topic, "old_driver", owner=str(uuid.uuid4()))
    old = recover_slices(base)
    run_batch(old, 0)
    written = run_batch(old, 1, record=False)  # the old driver's tasks of batch 1 committed

    # The old driver's step 4 reads the record, then stalls before it writes.
    read_done, resume = threading.Event(), threading.Event()
    real_read = SinkProgress.read

    def read(self, stable=True):
        got = real_read(self, stable)
        if threading.current_thread().name == "old-driver":
            read_done.set()
            resume.wait(60)
        return got

    monkeypatch.setattr(SinkProgress, "read", read)
    outcome: list[BaseException | None] = []

    def old_step_4() -> None:
        try:
            record_batch(old, 1, written)
            outcome.append(None)
        except BaseException as exc:  # handed to the test's thread
            outcome.append(exc)

    old_driver = threading.Thread(target=old_step_4, name="old-driver", daemon=True)
    old_driver.start()
    assert read_done.wait(60)

    new = recover_slices(base)  # the new driver: batch 1 is partly committed, replayed
    run_batch(new, 1)
    run_batch(new, 2)
    resume.set()
    old_driver.join(60)

    recorded = SinkProgress(kafka_bootstrap, topic, "old_driver").read()
    assert recorded.batch_id == 2, f"the record moved back to batch {recorded.batch_id}"
    assert isinstance(outcome[0], DriverFencedError), outcome
    got = Counter(v.decode() for _, _, _, v in kafka.consume_all(kafka_bootstrap, topic))
    assert got == Counter(f"b{b}-{i}" for b in range(3) for i in range(5))


def test_a_kept_step_4_producer_another_worker_fenced_is_replaced(kafka_bootstrap, new_topic):
    """PySpark runs a data source's commit in whichever Python worker of the driver is free:
    worker A keeps the step-4 producer after batch 0, worker B records batch 1 (its producer
    fences A's), and batch 2's commit runs in A again. Found by the dotted-ids test (two
    queries at once): ``DriverFencedError: ... run 1 was fenced by a newer start (run 1)``.
    A's producer is replaced, and the record goes on."""
    from connectors.kafka import slices as kafka_sink_slices

    topic = new_topic("old-driver-workers", partitions=1)
    s = recover_slices(KafkaSinkSettings(kafka_bootstrap, topic, "workers", owner="q-workers"))
    key = (s.names.commit_id, s.run_epoch)
    run_batch(s, 0)
    worker_a = kafka_sink_slices._RECORDERS.pop(key)  # worker A keeps its producer
    run_batch(s, 1)  # worker B: a fresh producer of the same transactional id
    kafka_sink_slices._RECORDERS.pop(key).close()
    kafka_sink_slices._RECORDERS[key] = worker_a  # batch 2's commit runs in worker A

    run_batch(s, 2)

    assert SinkProgress(kafka_bootstrap, topic, "workers").read().batch_id == 2
    assert kafka_sink_slices._RECORDERS[key] is not worker_a
