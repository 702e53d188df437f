"""The target table of the Delta sinks: its schema, and whether staged Parquet can be added to it.

The two-phase sink (and :class:`~connectors.dedup_delta_sink.DeltaDedupSink`, which shares its
commit) adds Parquet files written by the tasks to the table with delta-rs. Such an add is
correct only for a table that asks nothing more of a writer than "files with these columns":
no partition values, no NOT NULL column the rows may break, no CHECK constraint, generated or
identity column, column mapping (physical names) or row tracking. :func:`check_writable`
refuses every other table at start with :class:`UnsupportedTableFeatureError` naming the
feature (see :mod:`connectors.delta_sink`); the idempotent sink writes through Spark's Delta
writer, which honours them all, and only needs :func:`check_table_schema`.

Example
-------
>>> ensure_table("/data/events", df.schema)  # doctest: +SKIP
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import pyarrow as pa
from pyspark.sql.types import StructType

from spark_ext.sinks.errors import SchemaMismatchError, UnsupportedTableFeatureError

log = logging.getLogger(__name__)

#: Column metadata keys that make a column more than a plain column for a writer.
COLUMN_FEATURES = {
    "delta.generationExpression": "generated column",
    "delta.identity.start": "identity column",
    "delta.identity.step": "identity column",
    "delta.invariants": "column invariant",
}
#: Writer features an add of plain Parquet files does not implement.
UNSUPPORTED_WRITER_FEATURES = {
    "checkConstraints": "CHECK constraints",
    "generatedColumns": "generated columns",
    "identityColumns": "identity columns",
    "columnMapping": "column mapping",
    "rowTracking": "row tracking",
    "invariants": "column invariants",
    "icebergCompatV1": "Iceberg compatibility",
    "icebergCompatV2": "Iceberg compatibility",
}


# -- schema ------------------------------------------------------------------------------
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
    """Canonical text of a Spark/Delta schema JSON, ignoring nullability and metadata.

    Spark's ``StructType.json()`` and Delta's schema JSON use the same format, so the shapes
    of the rows and of the table compare as strings.
    """
    return json.dumps(_shape(json.loads(schema_json)), sort_keys=True)


def arrow_schema(schema: StructType) -> pa.Schema:
    """The Arrow schema staged files are written with (timestamps in UTC, like the session)."""
    from pyspark.sql.pandas.types import to_arrow_schema

    return to_arrow_schema(schema, timezone="UTC")


def _open(path: str | Path) -> Any:
    from deltalake import DeltaTable
    from deltalake.exceptions import TableNotFoundError

    try:
        return DeltaTable(str(path))
    except TableNotFoundError:
        return None


def check_table_schema(path: str | Path, schema: StructType) -> None:
    """Raise :class:`SchemaMismatchError` if the Delta table at ``path`` cannot take ``schema``.

    A missing table is fine (it is created with ``schema``).
    """
    table = _open(path)
    if table is None:
        return
    expected = schema_shape(table.schema().to_json())
    actual = schema_shape(schema.json())
    if expected != actual:
        raise SchemaMismatchError(str(path), table.schema().to_json(), schema.json())


# -- features ------------------------------------------------------------------------------
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


def unsupported_features(table: Any, schema: StructType) -> list[tuple[str, str]]:
    """``(feature, detail)`` of everything in ``table`` an add of staged Parquet would break.

    Pure inspection of a delta-rs ``DeltaTable`` and the rows' Spark schema; an empty list
    means the sink can write the table correctly.
    """
    found: list[tuple[str, str]] = []
    metadata = table.metadata()
    config = metadata.configuration or {}
    if metadata.partition_columns:
        found.append(("partitioned table", f"partition columns {metadata.partition_columns}"))
    table_json = json.loads(table.schema().to_json())
    breaches = _not_null_breaches(table_json, json.loads(schema.json()), "")
    if breaches:
        found.append(("NOT NULL column", f"{breaches} are NOT NULL, the rows may hold nulls"))
    constraints = sorted(k for k in config if k.startswith("delta.constraints."))
    if constraints:
        found.append(("CHECK constraints", f"{constraints}"))
    mapping = config.get("delta.columnMapping.mode", "none")
    if mapping != "none":
        found.append(("column mapping", f"delta.columnMapping.mode = {mapping}"))
    if str(config.get("delta.enableRowTracking", "false")).lower() == "true":
        found.append(("row tracking", "delta.enableRowTracking = true"))
    columns: list[tuple[str, str]] = []
    _column_features(table_json, "", columns)
    found += [(feature, f"column {name}") for feature, name in columns]
    features = table.protocol().writer_features or []
    for name in features:
        label = UNSUPPORTED_WRITER_FEATURES.get(name)
        if label and all(f != label for f, _ in found):
            found.append((label, f"writer feature {name!r}"))
    return found


def check_writable(path: str | Path, schema: StructType) -> None:
    """Raise :class:`UnsupportedTableFeatureError` if staged Parquet cannot be added correctly.

    A missing table is fine. The first unsupported feature found is the one named.
    """
    table = _open(path)
    if table is None:
        return
    found = unsupported_features(table, schema)
    if found:
        feature, detail = found[0]
        raise UnsupportedTableFeatureError(str(path), feature, detail)


def ensure_table(path: str | Path, schema: StructType) -> None:
    """Create an empty Delta table with ``schema`` at ``path`` unless one exists (and fits).

    Raises :class:`SchemaMismatchError` or :class:`UnsupportedTableFeatureError` for an
    existing table the staged files cannot be added to.
    """
    from deltalake import DeltaTable

    check_table_schema(path, schema)
    check_writable(path, schema)
    Path(path).mkdir(parents=True, exist_ok=True)
    DeltaTable.create(str(path), schema=arrow_schema(schema), mode="ignore")
