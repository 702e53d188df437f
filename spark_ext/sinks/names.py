"""Names derived from user-given ids (groups, transactional ids, Delta app ids, files), injective.

Parts are joined by :data:`SEP`, which no sink id or topic contains, so a name determines its
parts and a prefix scan finds one sink's names only (docs/design.md, "Kafka sinks", names).

>>> derived_name("spark_ext.sink", "a.b", "run")
'spark_ext.sink:a.b:run'
"""

from __future__ import annotations

from spark_ext.sinks.errors import SinkConfigError

__all__ = ["SEP", "derived_name", "derived_prefix"]

#: Joins the parts of a derived name; never in a sink id, a topic name or a fixed suffix.
SEP = ":"


def derived_name(namespace: str, *parts: str) -> str:
    """``namespace`` (fixed by the code) and ``parts`` (user-given ids and fixed suffixes, in a
    fixed order per kind of name) joined by :data:`SEP`; raises if a part is empty or has it."""
    for part in (namespace, *parts):
        if SEP in part or not part:
            raise SinkConfigError(
                "sink_id", f"{part!r} is empty or contains {SEP!r}, which derived names reserve"
            )
    return SEP.join((namespace, *parts))


def derived_prefix(namespace: str, *parts: str) -> str:
    """The prefix every name derived with these leading parts starts with (and no other)."""
    return derived_name(namespace, *parts) + SEP
