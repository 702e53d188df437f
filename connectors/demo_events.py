"""Deterministic demo events: JSON payment events, a chosen share of them malformed.

The same ``(n, seed)`` always gives the same records, so a clean run and a crashed run read
identical input.
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

__all__ = ["EPOCH", "MALFORMED", "event", "produce_events", "records"]

EPOCH = datetime(2026, 1, 1, tzinfo=UTC)

#: The kinds of malformed value the generator writes, cycled in this order.
MALFORMED = (
    b"{not json",
    b'{"event_id": "x", "user_id": "u", "amount": "twelve", "event_time": "2026-01-01T00:00:00Z"}',
    b'{"user_id": "u", "amount": 1.0, "event_time": "2026-01-01T00:00:00Z"}',
)


def event(i: int, rng: random.Random) -> dict[str, object]:
    return {
        "event_id": f"e{i:09d}",
        "user_id": f"u{rng.randrange(1000):04d}",
        "amount": round(rng.uniform(1, 500), 2),
        "event_time": (EPOCH + timedelta(milliseconds=i * 10)).isoformat().replace("+00:00", "Z"),
    }


def records(n: int, seed: int = 7, malformed_every: int = 0) -> Iterator[tuple[bytes, bytes]]:
    """``n`` records as ``(key, value)``; every ``malformed_every``-th value is malformed."""
    rng = random.Random(seed)
    bad = 0
    for i in range(n):
        if malformed_every and i % malformed_every == malformed_every - 1:
            yield f"bad{i}".encode(), MALFORMED[bad % len(MALFORMED)]
            bad += 1
            continue
        e = event(i, rng)
        yield str(e["user_id"]).encode(), json.dumps(e).encode()


def produce_events(
    bootstrap: str,
    topic: str,
    n: int,
    seed: int = 7,
    malformed_every: int = 0,
    partitions: int = 3,
    skew: float = 0.0,
) -> int:
    """Produce ``n`` demo records round-robin over ``partitions``; returns the count.

    ``skew``: that share of the records goes to partition 0 instead (drawn from ``n``, so the
    same count gives the same placement).
    """
    from connectors.kafka import produce

    place = random.Random(n)
    return produce(
        bootstrap,
        topic,
        (
            (k, v, 0 if skew and place.random() < skew else i % partitions)
            for i, (k, v) in enumerate(records(n, seed, malformed_every))
        ),
    )
