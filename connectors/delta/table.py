"""The Delta sinks' target table: its schema, and whether staged Parquet can be added to it
(:func:`ensure_table` at start, :func:`check_snapshot` at every commit; which tables are
refused: docs/design.md, "Delta sinks"). Spark's writer needs only :func:`check_table_schema`.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

from pyspark.sql.types import StructType

from spark_ext.sinks.delta_txn import LatestTable, arrow_schema, check_target_path, create_table
from spark_ext.sinks.errors import (
    SchemaMismatchError,
    UnsupportedTableFeatureError,
)
from spark_ext.storage import StorageSettings

__all__ = [
    "arrow_schema",
    "check_snapshot",
    "check_table_schema",
    "check_target_path",
    "ensure_table",
    "schema_shape",
    "unsupported_features",
]

log = logging.getLogger(__name__)

#: Column metadata keys that make a column more than a plain column for a writer.
COLUMN_FEATURES = {
    "delta.generationExpression": "generated column",
    "delta.identity.start": "identity column",
    "delta.identity.step": "identity column",
    "delta.invariants": "column invariant",
}
#: Writer features an add of plain Parquet files honours unless *used* (checked separately);
#: every other is refused by name (docs/design.md, "Delta sinks").
WRITABLE_WRITER_FEATURES = frozenset(
    {
        "appendOnly",
        "changeDataFeed",
        "checkConstraints",
        "columnMapping",
        "deletionVectors",
        "generatedColumns",
        "invariants",
        "timestampNtz",
    }
)
#: Reader features delta-rs reads (a writer must read the table too).
READABLE_READER_FEATURES = frozenset({"columnMapping", "deletionVectors", "timestampNtz"})
#: Writer versions below 7 imply their features (6: identity columns); above 7 are unknown.
_WRITER_VERSION_FEATURE = {6: "identityColumns"}
#: Named last: ``domainMetadata`` is required by the features worth naming.
_NAMED_LAST = ("domainMetadata",)


def _shape(node: Any) -> Any:
    """A schema JSON tree without nullability and metadata (what an append must match)."""
    if isinstance(node, dict):
        return {
            k: _shape(v)
            for k, v in node.items()
            if k not in {"nullable", "containsNull", "valueContainsNull", "metadata"}
        }
    if isinstance(node, list):
        return [_shape(v) for v in node]
    return node


def schema_shape(schema_json: str) -> str:
    """Canonical text of a Spark/Delta schema JSON (the same format), ignoring nullability
    and metadata."""
    return json.dumps(_shape(json.loads(schema_json)), sort_keys=True)


def check_table_schema(
    path: str | Path, schema: StructType, settings: StorageSettings | None = None
) -> Any:
    """Raise :class:`SchemaMismatchError` if the Delta table at ``path`` (if any; no table and
    cannot become one: ``DeltaTargetPathError``) cannot take ``schema``; returns the table
    (``None``: none yet; ``settings``: on object storage, default the session's)."""
    check_target_path(path, settings)
    table = LatestTable(str(path), settings).get()
    if table is not None and schema_shape(table.schema().to_json()) != schema_shape(schema.json()):
        raise SchemaMismatchError(str(path), table.schema().to_json(), schema.json())
    return table


def _not_null_breaches(table: Any, rows: Any, where: str) -> list[str]:
    """Paths of fields NOT NULL in the table that the rows' schema lets be null."""
    out: list[str] = []
    if isinstance(table, dict) and isinstance(rows, dict):
        if table.get("type") == "struct" and rows.get("type") == "struct":
            by_name = {f["name"]: f for f in rows.get("fields", [])}
            for f in table.get("fields", []):
                r = by_name.get(f["name"], {})
                name = f"{where}.{f['name']}" if where else f["name"]
                if f.get("nullable") is False and r.get("nullable", True):
                    out.append(name)
                out += _not_null_breaches(f.get("type"), r.get("type"), name)
        elif table.get("type") == "array" and rows.get("type") == "array":
            if table.get("containsNull") is False and rows.get("containsNull", True):
                out.append(f"{where}[]")
            out += _not_null_breaches(table.get("elementType"), rows.get("elementType"), where)
        elif table.get("type") == "map" and rows.get("type") == "map":
            if table.get("valueContainsNull") is False and rows.get("valueContainsNull", True):
                out.append(f"{where}{{}}")
            out += _not_null_breaches(table.get("valueType"), rows.get("valueType"), where)
    return out


def _column_features(node: Any, where: str, out: list[tuple[str, str]]) -> None:
    if isinstance(node, dict):
        if "name" in node and isinstance(node.get("metadata"), dict):
            name = f"{where}.{node['name']}" if where else node["name"]
            for key, feature in COLUMN_FEATURES.items():
                if key in node["metadata"]:
                    out.append((feature, name))
            where = name
        for v in node.values():
            _column_features(v, where, out)
    elif isinstance(node, list):
        for v in node:
            _column_features(v, where, out)


def _protocol_refusals(protocol: Any) -> list[tuple[str, str]]:
    """``(feature, detail)`` of the protocol's features this sink cannot write, by name."""
    found: list[tuple[str, str]] = []
    writer = protocol.min_writer_version
    if writer > 7:
        found.append((f"writer version {writer}", "unknown to this sink"))
    if writer in _WRITER_VERSION_FEATURE:
        name = _WRITER_VERSION_FEATURE[writer]
        found.append((name, f"implied by writer version {writer}"))
    for name in protocol.writer_features or []:
        if name not in WRITABLE_WRITER_FEATURES:
            found.append((name, f"writer feature {name!r} (delta-rs cannot write it)"))
    if protocol.min_reader_version > 3:
        found.append((f"reader version {protocol.min_reader_version}", "unknown to this sink"))
    for name in protocol.reader_features or []:
        if name not in READABLE_READER_FEATURES and all(f != name for f, _ in found):
            found.append((name, f"reader feature {name!r} (delta-rs cannot read it)"))
    return sorted(found, key=lambda f: f[0] in _NAMED_LAST)


def unsupported_features(
    table: Any, rows_schema_json: str | None, partition_by: tuple[str, ...] = ()
) -> list[tuple[str, str]]:
    """``(feature, detail)`` of everything in the snapshot ``table`` an add of staged Parquet
    would break; ``rows_schema_json``: the rows' schema (``None``: NOT NULL columns unchecked);
    ``partition_by``: partition columns the writer fills (none: partitioned is refused)."""
    found: list[tuple[str, str]] = []
    metadata = table.metadata()
    config = metadata.configuration or {}
    if list(metadata.partition_columns) != list(partition_by):
        found.append(("partitioned table", f"partition columns {metadata.partition_columns}"))
    table_json = json.loads(table.schema().to_json())
    if rows_schema_json:
        breaches = _not_null_breaches(table_json, json.loads(rows_schema_json), "")
        if breaches:
            found.append(("NOT NULL column", f"{breaches} are NOT NULL, the rows may hold nulls"))
    constraints = sorted(k for k in config if k.startswith("delta.constraints."))
    if constraints:
        found.append(("CHECK constraints", f"{constraints}"))
    mapping = config.get("delta.columnMapping.mode", "none")
    if mapping != "none":
        found.append(("column mapping", f"delta.columnMapping.mode = {mapping}"))
    columns: list[tuple[str, str]] = []
    _column_features(table_json, "", columns)
    found += [(feature, f"column {name}") for feature, name in columns]
    return found + _protocol_refusals(table.protocol())


def check_snapshot(
    table: Any, path: str | Path, rows_schema_json: str | None, partition_by: tuple[str, ...] = ()
) -> None:
    """Raise :class:`UnsupportedTableFeatureError` naming the first feature of the snapshot
    ``table`` an add of staged Parquet cannot honour (:func:`unsupported_features`)."""
    found = unsupported_features(table, rows_schema_json, partition_by)
    if found:
        feature, detail = found[0]
        raise UnsupportedTableFeatureError(str(path), feature, detail)


def ensure_table(
    path: str | Path, schema: StructType, settings: StorageSettings | None = None
) -> None:
    """Create an empty Delta table with ``schema`` at ``path`` unless one exists and staged
    Parquet can be added to it (else :class:`SchemaMismatchError`,
    :class:`UnsupportedTableFeatureError`, or ``DeltaTargetPathError`` for a file or a folder of
    other files)."""
    table = check_table_schema(path, schema, settings)
    if table is None:
        create_table(str(path), arrow_schema(schema), settings)
    else:
        check_snapshot(table, path, schema.json())
