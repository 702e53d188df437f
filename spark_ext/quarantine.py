"""Parse raw records against a contract: each row goes to the valid output or to quarantine
with its raw value, a reason and its source coordinates (docs/design.md invariant 3; an example:
README, "Python API")."""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import (
    BinaryType,
    DoubleType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

__all__ = [
    "CORRUPT",
    "EVENT_SCHEMA",
    "QUARANTINE_COLUMNS",
    "REASON_EMPTY",
    "REASON_MALFORMED",
    "REASON_MISSING",
    "REASON_NOT_OBJECT",
    "REASON_NOT_UTF8",
    "REASON_NULL_VALUE",
    "REASON_TYPE",
    "JsonContract",
    "Parsed",
    "parse_json",
    "quarantine_rows",
    "tag_json",
    "valid_rows",
]

CORRUPT = "_corrupt_record"

#: Quarantine reasons, one per failure kind (checked in this order; the two ``:`` reasons name
#: the first field concerned).
REASON_NULL_VALUE = "null_value"  # the record has no value (a tombstone)
REASON_NOT_UTF8 = "not_utf8"  # the value's bytes are not valid UTF-8
REASON_EMPTY = "empty_value"  # the value is empty or only whitespace
REASON_MALFORMED = "malformed_json"  # the value is not JSON
REASON_NOT_OBJECT = "not_an_object"  # valid JSON, but an array, string, number or null
REASON_TYPE = "type_mismatch"  # ``type_mismatch:<field>``: present, but not of the field's type
REASON_MISSING = "missing_field"  # ``missing_field:<field>``: a required field absent or null

#: Columns of every quarantine table; ``raw_value`` is the record's value as bytes, unchanged.
QUARANTINE_COLUMNS = ("raw_value", "reason", "topic", "partition", "offset", "kafka_timestamp")

EVENT_SCHEMA = StructType(
    [
        StructField("event_id", StringType()),
        StructField("user_id", StringType()),
        StructField("amount", DoubleType()),
        StructField("event_time", TimestampType()),
    ]
)


@dataclass(frozen=True)
class JsonContract:
    """What a valid JSON record looks like: its schema and the fields that must be present."""

    schema: StructType
    required: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        names = set(self.schema.fieldNames())
        missing = [f for f in self.required if f not in names]
        if missing:
            from spark_ext.errors import ConfigError

            raise ConfigError("JsonContract.required", f"fields not in the schema: {missing}")


class Parsed(NamedTuple):
    valid: DataFrame
    quarantine: DataFrame


def _type_mismatch(contract: JsonContract) -> Column:
    """For a record the typed parse flagged: the first field present in the JSON object
    whose typed value is null (the parser could not convert it), as ``type_mismatch:<f>``."""
    variant = F.try_parse_json(F.col("value"))
    reason = F.when(variant.isNull(), F.lit(REASON_MALFORMED)).when(
        ~F.schema_of_variant(variant).startswith("OBJECT"), F.lit(REASON_NOT_OBJECT)
    )
    for name in contract.schema.fieldNames():
        present = F.try_variant_get(variant, f"$.{name}", "string").isNotNull()
        reason = reason.when(
            present & F.col(f"_parsed.{name}").isNull(), F.lit(f"{REASON_TYPE}:{name}")
        )
    return reason.otherwise(F.lit(REASON_MALFORMED))


def _reason(contract: JsonContract) -> Column:
    """The quarantine reason of a row (null for a valid row); each branch only when needed."""
    reason = (
        F.when(F.col("value").isNull(), F.lit(REASON_NULL_VALUE))
        .when(~F.is_valid_utf8(F.col("value")), F.lit(REASON_NOT_UTF8))
        .when(  # from_json gives no struct for a blank value: only then look why
            F.col("_parsed").isNull(),
            F.when(F.trim(F.col("value")) == "", F.lit(REASON_EMPTY)).otherwise(
                F.lit(REASON_MALFORMED)
            ),
        )
        .when(F.col(f"_parsed.{CORRUPT}").isNotNull(), _type_mismatch(contract))
    )
    for name in contract.required:
        reason = reason.when(F.col(f"_parsed.{name}").isNull(), F.lit(f"{REASON_MISSING}:{name}"))
    return reason


def tag_json(df: DataFrame, contract: JsonContract) -> DataFrame:
    """``df`` (``value``, string or binary, plus source coordinates) with ``_parsed`` and
    ``_reason`` (null: valid), one parse of each value; ``raw_value`` stays exact (Spark's
    binary-to-string cast does not decode)."""
    schema = StructType([*contract.schema.fields, StructField(CORRUPT, StringType())])
    options = {"mode": "PERMISSIVE", "columnNameOfCorruptRecord": CORRUPT}
    if isinstance(df.schema["value"].dataType, BinaryType):
        df = df.withColumn("value", F.col("value").cast("string"))
    return df.withColumn("_parsed", F.from_json("value", schema, options)).withColumn(
        "_reason", _reason(contract)
    )


def _coordinates(df: DataFrame) -> list[str]:
    return [c for c in ("topic", "partition", "offset", "kafka_timestamp") if c in df.columns]


def valid_rows(tagged: DataFrame, contract: JsonContract) -> DataFrame:
    """The rows of a :func:`tag_json` result that pass: the contract's fields, then coordinates."""
    return tagged.where(F.col("_reason").isNull()).select(
        *[F.col(f"_parsed.{f}").alias(f) for f in contract.schema.fieldNames()],
        *_coordinates(tagged),
    )


def quarantine_rows(tagged: DataFrame) -> DataFrame:
    """The rows of a :func:`tag_json` result that fail: :data:`QUARANTINE_COLUMNS`."""
    return tagged.where(F.col("_reason").isNotNull()).select(
        F.col("value").cast("binary").alias("raw_value"),
        F.col("_reason").alias("reason"),
        *_coordinates(tagged),
    )


def parse_json(df: DataFrame, contract: JsonContract) -> Parsed:
    """Split a stamped DataFrame (``value`` plus source coordinates) exactly into
    :func:`valid_rows` and :func:`quarantine_rows`."""
    tagged = tag_json(df, contract)
    return Parsed(valid_rows(tagged, contract), quarantine_rows(tagged))
