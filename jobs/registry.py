"""Which guarantee jobs exist, by name, as the recovery harness sees them.

Each entry is a :class:`~spark_ext.recovery.RecoveryCase` declared per family in
:mod:`jobs.cases`; :data:`JOBS` lists them in one table.

Example
-------
>>> from jobs import registry
>>> [o.expected.value for o in registry.get("at_most_once").outputs]
['gap']
>>> sorted(registry.names())[:2]
['at_least_once', 'at_most_once']
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from jobs.cases import kafka_to_delta, kafka_to_kafka, readings, tracker, upsert
from spark_ext.errors import SparkExtError
from spark_ext.recovery import RecoveryCase


class UnknownJobError(SparkExtError, KeyError):
    """No job of that name is registered; the message lists the known ones."""

    def __init__(self, name: str, known: Sequence[str]) -> None:
        self.name = name
        super().__init__(f"no job {name!r} (known: {', '.join(sorted(known))})")

    def __str__(self) -> str:
        return str(self.args[0])


def _by_name(cases: Iterable[RecoveryCase]) -> dict[str, RecoveryCase]:
    """The cases by name, in their order; a name declared twice is a ``ValueError``."""
    table: dict[str, RecoveryCase] = {}
    for case in cases:
        if case.name in table:
            raise ValueError(f"job {case.name!r} is declared twice")
        table[case.name] = case
    return table


#: Every registered job by name, family by family.
JOBS: dict[str, RecoveryCase] = _by_name(
    (
        *kafka_to_delta.CASES,
        *kafka_to_kafka.CASES,
        *tracker.CASES,
        *readings.CASES,
        *upsert.CASES,
    )
)


def names() -> list[str]:
    """Names of the registered jobs."""
    return list(JOBS)


def get(name: str) -> RecoveryCase:
    """The registered job ``name``; :class:`UnknownJobError` if there is none."""
    try:
        return JOBS[name]
    except KeyError:
        raise UnknownJobError(name, list(JOBS)) from None
