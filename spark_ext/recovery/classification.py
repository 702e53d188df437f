"""Recovery classes: what a fault did to a job's output, decided on rows alone (no Spark).

Definitions: docs/design.md, "Recovery classes". Example: :mod:`spark_ext.recovery`.
"""

from __future__ import annotations

import contextlib
from collections import Counter
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

__all__ = [
    "Comparison",
    "FinalStateView",
    "OutputSpec",
    "RecoveryClass",
    "Row",
    "RowDiff",
    "RowKey",
    "StateDiff",
    "classify",
    "final_state",
    "without",
]

Row = Mapping[str, Any]
RowKey = tuple[Hashable, ...]


class RecoveryClass(StrEnum):
    """What a fault did to the output (docs/design.md, "Recovery classes")."""

    PRECISE = "precise"
    GAP = "gap"
    ROLLBACK_REPEATING = "rollback-repeating"
    ROLLBACK_CONVERGENT = "rollback-convergent"
    ROLLBACK_DIVERGENT = "rollback-divergent"


@dataclass(frozen=True)
class FinalStateView:
    """An output read as a final state: per ``key``, the ``value`` columns of the last row by
    ``order`` (emission order, never compared; empty: the order rows were read)."""

    key: tuple[str, ...]
    value: tuple[str, ...]
    order: tuple[str, ...] = ()


@dataclass(frozen=True)
class OutputSpec:
    """Which columns of a job's output are compared, and how to read its final state."""

    columns: tuple[str, ...]
    final_state: FinalStateView | None = None

    def __post_init__(self) -> None:
        if not self.columns:
            raise ValueError("OutputSpec.columns must name at least one column")
        if self.final_state is not None:
            unknown = [
                c for c in (*self.final_state.key, *self.final_state.value) if c not in self.columns
            ]
            if unknown:
                raise ValueError(f"final-state columns not in OutputSpec.columns: {unknown}")

    def read_columns(self) -> tuple[str, ...]:
        """Every column a reader must return: the compared ones and the order columns."""
        order = self.final_state.order if self.final_state else ()
        return (*self.columns, *(c for c in order if c not in self.columns))


@dataclass(frozen=True)
class RowDiff:
    """One distinct row whose count differs between the clean and the recovered output."""

    row: dict[str, Any]
    expected_count: int
    observed_count: int

    @property
    def duplicate(self) -> bool:
        """An extra copy of a row the clean run also wrote."""
        return self.expected_count > 0 and self.observed_count > self.expected_count


@dataclass(frozen=True)
class StateDiff:
    """A key whose final state differs; ``None`` means the key is absent on that side."""

    key: dict[str, Any]
    expected: dict[str, Any] | None
    observed: dict[str, Any] | None


@dataclass(frozen=True)
class Comparison:
    """``O_f + O'`` against ``O_e``: the class and the differing rows."""

    recovery_class: RecoveryClass
    missing: tuple[RowDiff, ...]
    extra: tuple[RowDiff, ...]
    expected_rows: int
    observed_rows: int
    final_state_equal: bool
    state_diffs: tuple[StateDiff, ...] = ()

    @property
    def missing_rows(self) -> int:
        return sum(d.expected_count - d.observed_count for d in self.missing)

    @property
    def duplicate_rows(self) -> int:
        return sum(d.observed_count - d.expected_count for d in self.extra if d.duplicate)

    @property
    def differing_rows(self) -> int:
        """Extra rows that are not copies of any clean row."""
        return sum(d.observed_count for d in self.extra if not d.duplicate)


def _normal(value: Any) -> Hashable:
    """A hashable, comparable form of a cell (NaN and None are one missing value)."""
    if value is None:
        return None
    if hasattr(value, "item") and not isinstance(value, (str, bytes)):  # numpy scalars
        with contextlib.suppress(ValueError, TypeError):
            return _normal(value.item())
    if isinstance(value, (list, tuple)):
        return tuple(_normal(v) for v in value)
    if isinstance(value, dict):
        return tuple(sorted((k, _normal(v)) for k, v in value.items()))
    with contextlib.suppress(TypeError, ValueError):
        if value != value:  # NaN, pandas NaT
            return None
    return value


def _project(row: Row, columns: Sequence[str]) -> RowKey:
    try:
        return tuple(_normal(row[c]) for c in columns)
    except KeyError as exc:
        raise ValueError(f"output row lacks compared column {exc.args[0]!r}: {dict(row)}") from None


def _sort_key(item: Any) -> tuple[str, ...]:
    return tuple(repr(v) for v in (item if isinstance(item, tuple) else (item,)))


def final_state(rows: Sequence[Row], view: FinalStateView) -> dict[RowKey, RowKey]:
    """Per key, the value columns of the last row by ``view.order`` (ties: read order)."""
    indexed = list(enumerate(rows))
    if view.order:
        indexed.sort(key=lambda ir: (_project(ir[1], view.order), ir[0]))
    state: dict[RowKey, RowKey] = {}
    for _, row in indexed:
        state[_project(row, view.key)] = _project(row, view.value)
    return state


def classify(expected: Sequence[Row], observed: Sequence[Row], spec: OutputSpec) -> Comparison:
    """Compare ``observed`` (``O_f + O'``) with ``expected`` (``O_e``) on ``spec``; classify it."""
    cols = spec.columns
    want = Counter(_project(r, cols) for r in expected)
    got = Counter(_project(r, cols) for r in observed)
    missing, extra = (
        tuple(
            RowDiff(dict(zip(cols, k, strict=True)), want[k], got[k])
            for k in sorted(diff, key=_sort_key)
        )
        for diff in (want - got, got - want)
    )
    state_diffs: tuple[StateDiff, ...] = ()
    if spec.final_state is not None:
        view = spec.final_state
        want_state, got_state = final_state(expected, view), final_state(observed, view)
        state_diffs = tuple(
            StateDiff(
                dict(zip(view.key, k, strict=True)),
                dict(zip(view.value, want_state[k], strict=True)) if k in want_state else None,
                dict(zip(view.value, got_state[k], strict=True)) if k in got_state else None,
            )
            for k in sorted(set(want_state) | set(got_state), key=_sort_key)
            if want_state.get(k) != got_state.get(k)
        )
        state_equal = not state_diffs
    else:
        state_equal = not missing and not extra

    if not missing and not extra:
        cls = RecoveryClass.PRECISE
    elif not extra:
        cls = RecoveryClass.GAP
    elif not missing and all(d.duplicate for d in extra):
        cls = RecoveryClass.ROLLBACK_REPEATING
    elif spec.final_state is not None and state_equal:
        cls = RecoveryClass.ROLLBACK_CONVERGENT
    else:
        cls = RecoveryClass.ROLLBACK_DIVERGENT
    return Comparison(
        recovery_class=cls,
        expected_rows=sum(want.values()),
        observed_rows=sum(got.values()),
        missing=missing,
        extra=extra,
        final_state_equal=state_equal,
        state_diffs=state_diffs,
    )


def without(rows: Sequence[Row], removed: Sequence[Row], spec: OutputSpec) -> list[Row]:
    """``rows`` minus ``removed`` as multisets on ``spec``'s columns (each removal once)."""
    left = Counter(_project(r, spec.columns) for r in removed)
    out: list[Row] = []
    for row in rows:
        key = _project(row, spec.columns)
        if left[key] > 0:
            left[key] -= 1
        else:
            out.append(row)
    return out
