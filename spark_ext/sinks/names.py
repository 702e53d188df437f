"""Names derived from user-given ids (consumer groups, transactional ids, Delta app ids, files).

A sink derives names from its sink id and, for Kafka, the output topic. Both may contain dots
(sink ids ``[A-Za-z0-9_.]``, topics ``[A-Za-z0-9._-]``), so joining them with ``.`` is not
injective: sink ``X``'s run group ``spark_ext.sink.X.run`` was sink ``X.run``'s progress group,
and sink ``a.b`` -> topic ``c`` shared transactional ids with sink ``a`` -> topic ``b.c``
(issue #24, N7 and N8). Here the user-given parts are joined with :data:`SEP`, a character no
sink id and no topic name may contain, so a name determines its parts, and a prefix scan
(:func:`derived_prefix`, e.g. Kafka's ListGroups) finds the names of one sink and no other's.

Example
-------
>>> derived_name("spark_ext.sink", "a.b", "run")
'spark_ext.sink:a.b:run'
>>> derived_name("spark_ext.sink", "a", "b.run") != derived_name("spark_ext.sink", "a.b", "run")
True
>>> derived_prefix("spark_ext.sink", "a")
'spark_ext.sink:a:'
"""

from __future__ import annotations

from spark_ext.sinks.errors import SinkConfigError

__all__ = ["SEP", "derived_name", "derived_prefix"]

#: Joins the parts of a derived name; never in a sink id, a topic name or a fixed suffix.
SEP = ":"


def derived_name(namespace: str, *parts: str) -> str:
    """``namespace`` and ``parts`` joined by :data:`SEP`; raises if a part contains it.

    ``namespace`` is a fixed string of the code (it may contain dots); ``parts`` are the
    user-given ids and fixed suffixes, in a fixed order per kind of name.
    """
    for part in (namespace, *parts):
        if SEP in part or not part:
            raise SinkConfigError(
                "sink_id", f"{part!r} is empty or contains {SEP!r}, which derived names reserve"
            )
    return SEP.join((namespace, *parts))


def derived_prefix(namespace: str, *parts: str) -> str:
    """The prefix every name derived with these leading parts starts with (and no other)."""
    return derived_name(namespace, *parts) + SEP
