"""Retention and disorder, the faults outside a job: each cell gets its declared outcome.

``output-trim``: the job is killed after a batch's records are written, the output topic is
trimmed (what retention does), the job restarted. The idempotent Kafka sink proves a replay by
reading back its records, so it must stop with ``ReplayUnprovableError`` and write nothing
(so does the two-phase one with a transaction per slice, which reads back a partly committed
batch: issue #24, N1); with one transaction per batch the two-phase Kafka sink keeps the batch
id in that transaction and stays precise on what retention left. ``txn-retention``: the Delta output's ``txn`` expires between the kill and the
restart: ``DeltaTxnExpiredError``, nothing written. ``log-retention``: the Delta log is trimmed
to a checkpoint between the kill and the restart; the txn lives on there: precise.
``disorder``: the tracker's input jitters
6 s inside each partition where 1 s was promised: every input row is in exactly one window
count or one late row.

CI runs the idempotent Kafka sink's trim and the tracker's disorder; the other cells are heavy
(``--heavy``; and in ``spark-ext matrix``).
"""

from __future__ import annotations

import pytest

from jobs import registry
from spark_ext.recovery import FaultClass, RecoveryClass, RecoveryResult

pytestmark = [pytest.mark.integration, pytest.mark.crash]

#: The cells CI leaves to the full matrix.
full_matrix = pytest.mark.heavy


def run(harness, job: str, fault: FaultClass, results: list[RecoveryResult]) -> RecoveryResult:
    [result] = harness.run_cell(registry.get(job), fault)
    results.append(result)
    c = result.comparison
    assert result.as_expected, (
        f"{result.label} under {fault}: {result.observed}, declared {result.expected} "
        f"({result.note})\nmissing: {[d.row for d in c.missing[:5]]}\n"
        f"extra: {[d.row for d in c.extra[:5]]}"
    )
    return result


def test_idempotent_kafka_sink_refuses_a_replay_whose_output_retention_trimmed(
    harness, recovery_results
):
    result = run(harness, "exactly_once_kafka_idempotent", FaultClass.OUTPUT_TRIM, recovery_results)
    assert result.error == "ReplayUnprovableError"
    assert "rows expired" in result.note and not result.note.startswith("killed, 0 rows")


@full_matrix
@pytest.mark.parametrize(
    "job",
    ["exactly_once_delta", "exactly_once_delta_idempotent", "dedup_delta", "tracker_windows"],
)
def test_delta_outputs_stop_on_a_txn_expired_between_write_and_replay(
    harness, recovery_results, job: str
):
    """The tracker's outputs too (DeltaIdempotentWriter since f2b8f02; Spark's own
    txnAppId/txnVersion writer wrote the replayed batch again: 35 duplicate windows)."""
    result = run(harness, job, FaultClass.TXN_RETENTION, recovery_results)
    assert result.error == "DeltaTxnExpiredError"


@full_matrix
@pytest.mark.parametrize(
    "job",
    ["exactly_once_delta", "exactly_once_delta_idempotent", "dedup_delta", "tracker_windows"],
)
def test_delta_outputs_recognise_a_replay_after_their_log_was_trimmed_to_a_checkpoint(
    harness, recovery_results, job: str
):
    result = run(harness, job, FaultClass.LOG_RETENTION, recovery_results)
    assert result.error is None and result.recovery_class is RecoveryClass.PRECISE


def test_tracker_accounts_every_row_of_input_disordered_beyond_its_promise_once(
    harness, recovery_results
):
    result = run(harness, "tracker_windows", FaultClass.DISORDER, recovery_results)
    assert result.recovery_class is RecoveryClass.PRECISE
    late = int(result.note.split("; ")[1].split()[0])
    assert 0 < late < result.comparison.expected_rows


@full_matrix
def test_two_tracked_queries_account_every_row_of_disordered_input_once(harness, recovery_results):
    """Upstream promised ordered partitions, fed 6 s of jitter: each input row is counted once
    in its window's downstream total or is one upstream late row."""
    result = run(harness, "tracker_two_queries", FaultClass.DISORDER, recovery_results)
    assert result.recovery_class is RecoveryClass.PRECISE
    late = int(result.note.split("; ")[1].split()[0])
    assert 0 < late < result.comparison.expected_rows


def test_trimming_a_topic_deletes_every_record_and_an_empty_topic_is_no_fault(
    kafka_bootstrap, new_topic
):
    from connectors.kafka import consume_all, produce
    from spark_ext.recovery import RetentionNotApplied
    from spark_ext.recovery.retention import trim_topic

    topic = new_topic("trim", partitions=2)
    with pytest.raises(RetentionNotApplied, match="no record to trim"):
        trim_topic(kafka_bootstrap, topic)
    produce(kafka_bootstrap, topic, [(None, b"a", 0), (None, b"b", 0), (None, b"c", 1)])
    assert trim_topic(kafka_bootstrap, topic) == {0: 2, 1: 1}
    assert consume_all(kafka_bootstrap, topic) == []
