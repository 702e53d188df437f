"""Every consumer group and transactional id a Kafka sink derives from its sink id and topic.

Built with :func:`~spark_ext.sinks.names.derived_name` (parts joined by ``:``, why:
docs/design.md, "Kafka sinks", names), so a prefix scan finds one sink's names and no other's.

========================== ============================================ =========================
name                       value                                        holds
========================== ============================================ =========================
:attr:`progress_group`     ``spark_ext.sink:<sink>``                    batch, owner, end offsets
:attr:`run_group`          ``spark_ext.sink:<sink>:run``                run epoch (fences drivers)
:meth:`slice_group`        ``spark_ext.sink:<sink>:s<i>``               slice ``i``'s last batch
:meth:`probe_group`        ``spark_ext.sink:<sink>:s<i>:probe``         a kept producer's probe
:meth:`task_group`         ``spark_ext.sink:<sink>:t<i>``               idempotent task marker
:attr:`commit_id`          ``spark_ext.tx:<sink>:<topic>:commit``       the driver's transactions
:meth:`slice_id`           ``spark_ext.tx:<sink>:<topic>:s<i>``         slice ``i``'s transactions
========================== ============================================ =========================

Groups are per sink id, transactional ids per sink id and topic (one sink id writing two topics
does not fence itself, FLINK-11654); ``KafkaSinkNames("a.b", "c")`` and
``KafkaSinkNames("a", "b.c")`` share no name.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from spark_ext.sinks.names import derived_name, derived_prefix

__all__ = ["GROUPS", "TRANSACTIONS", "KafkaSinkNames"]

GROUPS = "spark_ext.sink"  # the namespace of the sinks' consumer groups
TRANSACTIONS = "spark_ext.tx"  # and of their transactional ids
_SLICE = re.compile(r"s(0|[1-9][0-9]*)")


@dataclass(frozen=True)
class KafkaSinkNames:
    """The names of the sink ``sink_id`` writing ``topic`` (see the module's table)."""

    sink_id: str
    topic: str

    @property
    def progress_group(self) -> str:
        return derived_name(GROUPS, self.sink_id)

    @property
    def run_group(self) -> str:
        return derived_name(GROUPS, self.sink_id, "run")

    def slice_group(self, index: int) -> str:
        return derived_name(GROUPS, self.sink_id, f"s{index}")

    def probe_group(self, index: int) -> str:
        return derived_name(GROUPS, self.sink_id, f"s{index}", "probe")

    def task_group(self, index: int) -> str:
        return derived_name(GROUPS, self.sink_id, f"t{index}")

    @property
    def commit_id(self) -> str:
        return derived_name(TRANSACTIONS, self.sink_id, self.topic, "commit")

    def slice_id(self, index: int) -> str:
        return derived_name(TRANSACTIONS, self.sink_id, self.topic, f"s{index}")

    def slice_of_group(self, group: str) -> int | None:
        """``i`` if ``group`` is :meth:`slice_group` ``(i)`` of this sink, else ``None``."""
        return _slice_after(derived_prefix(GROUPS, self.sink_id), group)

    def slice_of_transactional_id(self, transactional_id: str) -> int | None:
        """``i`` if ``transactional_id`` is :meth:`slice_id` ``(i)``, else ``None``."""
        return _slice_after(
            derived_prefix(TRANSACTIONS, self.sink_id, self.topic), transactional_id
        )


def _slice_after(prefix: str, name: str) -> int | None:
    """``i`` if ``name`` is ``prefix`` + ``s<i>`` (a prefix no other sink's names share)."""
    if not name.startswith(prefix):
        return None
    found = _SLICE.fullmatch(name[len(prefix) :])
    return int(found.group(1)) if found else None
