"""Who owns a Kafka sink id: the query id in the sink's progress record (issue #24, N11).

Idempotence is keyed by (sink id, batch id); a second query (its own checkpoint, another
input) with the same sink id starts at batch 0 again and was taken for a replay of the first
query's batch 0: the idempotent and whole-batch sinks skipped it (its rows lost, exit 0).
Every Kafka sink therefore keeps its owner, Spark's streaming query id
(:class:`~spark_ext.sinks.owner.SinkOwner`), *in* its progress record
(:class:`~connectors.kafka.progress.SinkProgress`), written with every batch it records,
so the owner and the batch marker change together in one offset commit (or transaction).

At start, before anything is fenced, written or aborted, :func:`check_progress_owner` reads the
record (without waiting for an open transaction: a killed driver's would hold a stable read
back until the broker aborts it) and decides with
:func:`~spark_ext.sinks.owner.check_owner`. Then, after the sink fenced older drivers,
:func:`record_owner` writes what the decision needs:

* ``FIRST`` (no record, or one written before owners existed, adopted with a warning): our
  owner, with the recorded batch and end offsets kept, or ``"batch": null`` and the end
  offsets of this moment when nothing was recorded (the next batch's records lie above them);
* ``TAKE_OVER`` (``take_over=True`` and another owner): our owner, ``"batch": null`` and the
  end offsets of this moment, in one commit: batch ids start again at 0, and nothing the old
  owner wrote is read back as ours;
* ``SAME``: nothing.

Every batch re-reads the record it is made against (:func:`check_still_owner`), so a query
that was handed over while it ran stops at its next commit with
:class:`~spark_ext.sinks.errors.SinkOwnerError`; the two-phase sinks' run epoch (which names
its owner too) stops its tasks before they write.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from connectors.kafka.progress import Recorded, SinkProgress
from connectors.kafka.readback import end_offsets
from spark_ext.sinks.errors import SinkConfigError, SinkOwnerError
from spark_ext.sinks.owner import OwnerDecision, SinkOwner, check_owner, owner_of_batch

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

__all__ = ["check_progress_owner", "check_still_owner", "record_owner", "writer_owner"]

log = logging.getLogger(__name__)


def check_progress_owner(
    progress: SinkProgress, owner: SinkOwner, *, take_over: bool
) -> OwnerDecision:
    """The owner decision at start (raises :class:`SinkOwnerError` for another owner unless
    ``take_over``); reads only."""
    recorded = progress.read(stable=False)
    name = recorded.owner if recorded is not None else None
    decision = check_owner(
        progress.sink_id,
        progress.topic,
        SinkOwner(name).code if name else None,
        owner,
        take_over=take_over,
        recorded_name=name,
    )
    if decision is OwnerDecision.FIRST and recorded is not None and recorded.batch_id is not None:
        log.warning(
            "%s: sink %r recorded batch %d without an owner; adopted by query %s",
            progress.topic,
            progress.sink_id,
            recorded.batch_id,
            owner,
        )
    return decision


def record_owner(progress: SinkProgress, owner: SinkOwner, decision: OwnerDecision) -> None:
    """Write the progress record ``decision`` needs (after the sink fenced older drivers)."""
    if decision is OwnerDecision.SAME:
        return
    recorded = progress.read()
    slices = recorded.slices if recorded is not None else 0
    if decision is OwnerDecision.FIRST and recorded is not None and recorded.batch_id is not None:
        batch, ends = recorded.batch_id, recorded.end_offsets
    else:
        batch, ends = None, end_offsets(progress.bootstrap, progress.topic)
    progress.record(batch, ends, slices=slices, owner=owner.query_id)
    log.info(
        "%s: sink %r owned by query %s (%s, batch %s recorded)",
        progress.topic,
        progress.sink_id,
        owner,
        decision.value,
        batch,
    )


def writer_owner(given: SinkOwner | None, df: DataFrame, writer: str) -> SinkOwner:
    """The owner of a ``foreachBatch`` writer: ``given``, else the streaming query calling it;
    outside a query without one, :class:`SinkConfigError` naming ``owner``."""
    owner = given or owner_of_batch(df)
    if owner is None:
        raise SinkConfigError(
            "owner", f"{writer} called outside a streaming query: pass owner= (the query id)"
        )
    return owner


def check_still_owner(progress: SinkProgress, recorded: Recorded | None, owner: str | None) -> None:
    """:class:`SinkOwnerError` if ``recorded`` (read for this commit) names another owner than
    ``owner`` (``None``: a sink used without an owner, checked by nobody)."""
    if owner is None or recorded is None or recorded.owner is None or recorded.owner == owner:
        return
    raise SinkOwnerError(progress.topic, progress.sink_id, recorded.owner, owner)
