"""A replayed batch that Spark slices differently is written once (issue #24, N1).

Invariant 2 promises the same rows for the same offsets, not the same partitioning: the Kafka
source's ``minPartitions``, a ``coalesce``, the rate source and file splits follow settings a
restart may change. Each sequence runs the sliced sink's job once with a fault, on
``local[2,2]`` with every batch cut into 6 slices (``minPartitions``), then again from the same
checkpoint on ``local[1,2]`` with the batch in one slice (``coalesce(1)``), in both forms of the
sink (the data source and :class:`KafkaTwoPhaseWriter` in ``foreachBatch``):

* ``recorded``: batch 0 recorded (step 4), Spark's commit log not written (``raise``): the
  restart replays batch 0;
* ``partial``: the job killed once slice 0 of batch 1 committed (step 3): some slices of
  batch 1 committed, the batch not recorded; the restart replays it.

Before, the digest of a whole slice recognised a slice only when the replay cut the same one:
every record of a re-sliced replay was written again.

A third sequence trims the output topic between the two runs of ``partial`` (what retention
does): the records the re-sliced replay would read back are gone, and it cut its slices
otherwise than the committed ones, so it cannot be proven and must stop with
``ReplayUnprovableError``, writing nothing.
"""

from __future__ import annotations

import json
from collections import Counter
from concurrent.futures import Future, ThreadPoolExecutor

import pytest

from connectors import kafka
from connectors.kafka.settings import KafkaSinkSettings
from connectors.kafka.slices import replay_state
from spark_ext.jobrun import REPO, JobRun, run_job
from spark_ext.recovery.kills import JOB_TIMEOUT_S
from spark_ext.recovery.retention import trim_topic
from spark_ext.sinks.protocol import KAFKA_SLICED
from tests.conftest import unique_topic
from tests.connectors.conftest import EVENTS

pytestmark = [pytest.mark.integration, pytest.mark.crash]

JOB = "tests.connectors.kafka._kafka_slicing_job"
FORMS = ("datasource", "foreach")
FAULTS = {
    "recorded": (f"{KAFKA_SLICED.point(4)}@0:raise", "raise"),
    "partial": (f"{KAFKA_SLICED.point(3)}@1#0:kill", "kill"),
}


def sources(bootstrap: str, topic: str) -> Counter:
    """How many times each input record (topic, partition, offset) is in ``topic``."""
    got = kafka.consume_all(bootstrap, topic, read_committed=True)
    return Counter(
        (src["topic"], src["partition"], src["offset"])
        for src in (json.loads(value) for _, _, _, value in got)
    )


@pytest.fixture(scope="module")
def resliced(kafka_bootstrap, events_topic, tmp_path_factory) -> dict[tuple[str, str], Future]:
    """Per (case, form): the output topic and the two runs (faulted, then re-sliced)."""

    def sequence(case: str, form: str, trim: bool = False):
        def run() -> tuple[str, JobRun, tuple[int | None, int | None], JobRun]:
            out = unique_topic(kafka_bootstrap, f"resliced-{case}", partitions=3)
            chk = tmp_path_factory.mktemp(f"{case}-{form}") / "chk"
            base = ["--topic", events_topic, "--out", out, "--checkpoint", str(chk)]
            sink_id = f"resliced_{case}_{form}"
            base += ["--sink-id", sink_id, "--form", form]
            fault, _kind = FAULTS[case]
            first = run_job(
                JOB,
                [*base, "--master", "local[2,2]", "--min-partitions", "6"],
                fault=fault,
                timeout_s=JOB_TIMEOUT_S,
                cwd=REPO,
            )
            left = replay_state(KafkaSinkSettings(kafka_bootstrap, out, sink_id))
            if trim:
                trim_topic(kafka_bootstrap, out)
            second = run_job(
                JOB,
                [*base, "--master", "local[1,2]", "--coalesce", "1"],
                timeout_s=JOB_TIMEOUT_S,
                cwd=REPO,
            )
            return out, first, (left.recorded, left.partial), second

        return run

    # two sequences at a time (tests.conftest.start_selected's reasoning: job processes
    # spend most of their time starting a JVM and waiting)
    pool = ThreadPoolExecutor(max_workers=2, thread_name_prefix="resliced")
    futures = {(c, f): pool.submit(sequence(c, f)) for c in FAULTS for f in FORMS}
    futures[("partial-trimmed", "datasource")] = pool.submit(
        sequence("partial", "datasource", trim=True)
    )
    pool.shutdown(wait=False)
    return futures


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("case", sorted(FAULTS))
def test_a_replayed_batch_sliced_differently_is_written_once(
    kafka_bootstrap, events_topic, resliced, case, form
):
    out, first, left, second = resliced[(case, form)].result()
    point, kind = FAULTS[case][0].split("@")[0], FAULTS[case][1]

    assert first.fired(point, kind), first.output_tail
    # what the restart starts from: batch 0 recorded; in "partial", batch 1 partly committed
    assert left == (0, 1 if case == "partial" else None)
    assert second.ok, second.output_tail
    got = sources(kafka_bootstrap, out)
    twice = sorted(k for k, n in got.items() if n > 1)
    assert (len(got), len(twice)) == (EVENTS, 0), f"{sum(got.values())} records, twice: {twice[:5]}"


def test_a_partly_committed_batch_whose_records_were_trimmed_and_is_sliced_otherwise_is_refused(
    kafka_bootstrap, resliced
):
    out, first, left, second = resliced[("partial-trimmed", "datasource")].result()
    assert first.killed and left == (0, 1), first.output_tail
    assert not second.ok and "ReplayUnprovableError" in second.output_tail, second.output_tail
    # only what the killed run committed is there: retention left nothing of it to read back
    assert sum(sources(kafka_bootstrap, out).values()) == 0
