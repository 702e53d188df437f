"""The idle-partition policy: after a processing-time timeout, a close marker and a
completeness-downgrade row (docs/design.md, "Tracked queries": idle partitions)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from spark_ext.streaming.gate import NO_FRONTIER
from spark_ext.tracker.substreams import duration_ms

__all__ = ["IdlePolicy"]


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
        for s in sources:
            p = progress.get(s, NO_FRONTIER)
            if s not in self._last_move or p != self._last_seen.get(s):
                self._last_move[s], self._last_seen[s] = now_ms, p
        if oldest_open_end is None:
            return []
        out, timeout = [], self.timeout_ms
        for s in sources:
            p = progress.get(s, NO_FRONTIER)
            if p >= oldest_open_end or now_ms - self._last_move[s] < timeout:
                continue
            others = [progress.get(o, NO_FRONTIER) for o in sources if o != s]
            through = min(others) if others else oldest_open_end
            if through > p:
                out.append((s, through))
                self._last_move[s] = now_ms  # another declaration only after another timeout
        return out
