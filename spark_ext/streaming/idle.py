"""The idle-partition policy: after a processing-time timeout, a close marker and a
completeness-downgrade row (docs/design.md, "Tracked queries": idle partitions)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from spark_ext.tracker.substreams import duration_ms

__all__ = ["IdlePolicy", "idle_decisions"]


@dataclass
class IdlePolicy:
    """Declare a partition idle after ``timeout`` (e.g. ``"30 seconds"``) without progress;
    ``mark(topic, partition, through_ms)`` writes a close marker to that partition."""

    timeout: int | str
    mark: Callable[[str, int, int], None]
    _last_move: dict[str, float] = field(default_factory=dict, init=False, repr=False)
    _last_seen: dict[str, int] = field(default_factory=dict, init=False, repr=False)

    @property
    def timeout_ms(self) -> int:
        return duration_ms(self.timeout, "IdlePolicy.timeout")

    def decide(
        self,
        sources: Sequence[str],
        progress: Mapping[str, int],
        oldest_open_end: int | None,
        now_ms: float,
    ) -> list[tuple[str, int]]:
        """``(source, through_ms)`` to declare idle now (updates the policy's clocks)."""
        return idle_decisions(
            sources,
            progress,
            oldest_open_end,
            now_ms,
            self.timeout_ms,
            self._last_move,
            self._last_seen,
        )


def idle_decisions(
    sources: Sequence[str],
    progress: Mapping[str, int],
    oldest_open_end: int | None,
    now_ms: float,
    timeout_ms: int,
    last_move: dict[str, float],
    last_seen: dict[str, int],
) -> list[tuple[str, int]]:
    """Which partitions to declare idle, and through when; updates the two clocks."""
    none = -(2**63)
    for s in sources:
        p = progress.get(s, none)
        if s not in last_move or p != last_seen.get(s):
            last_move[s], last_seen[s] = now_ms, p
    if oldest_open_end is None:
        return []
    out = []
    for s in sources:
        p = progress.get(s, none)
        if p >= oldest_open_end or now_ms - last_move[s] < timeout_ms:
            continue
        others = [progress.get(o, none) for o in sources if o != s]
        through = min(others) if others else oldest_open_end
        if through > p:
            out.append((s, through))
            last_move[s] = now_ms  # another declaration only after another timeout
    return out
