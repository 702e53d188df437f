"""Who owns a Kafka sink id: the query id in the sink's progress record (docs/design.md, "Kafka
sinks", owner). At start :func:`check_progress_owner` decides and, after the sink fenced older
drivers, :func:`record_owner` writes; every batch re-reads it (:func:`check_still_owner`).
"""

from __future__ import annotations

import logging

from connectors.kafka.progress import Recorded, SinkProgress
from connectors.kafka.readback import end_offsets
from spark_ext.sinks.errors import SinkOwnerError
from spark_ext.sinks.owner import OwnerDecision, SinkOwner, check_owner
from spark_ext.sinks.protocol import check_batch_order

__all__ = ["check_progress_owner", "check_still_owner", "record_owner"]

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


def check_still_owner(
    progress: SinkProgress, batch_id: int, owner: str | None
) -> tuple[Recorded | None, bool]:
    """The progress record a commit of ``batch_id`` is made against, and whether it recorded
    that batch already: :class:`SinkOwnerError` if it names another owner than ``owner``
    (``None``: unchecked), ``BatchRegressionError`` for a batch below it."""
    recorded = progress.read()
    if owner is not None and recorded is not None and recorded.owner not in (None, owner):
        raise SinkOwnerError(progress.topic, progress.sink_id, recorded.owner, owner)
    done = check_batch_order(progress.sink_id, batch_id, recorded.batch_id if recorded else None)
    return recorded, done
