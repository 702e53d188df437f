"""Parse raw records against a contract; rows that fail go to quarantine with the reason.

Nothing is dropped silently (DESIGN.md invariant 3): every input row ends up either in the
valid output or in the quarantine output, which keeps the raw value, a reason and the
source coordinates (topic, partition, offset).

Example
-------
>>> contract = JsonContract(schema=EVENT_SCHEMA, required=("event_id", "event_time"))
>>> valid, quarantine = parse_json(kafka_df, contract)        # doctest: +SKIP
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import DoubleType, StringType, StructField, StructType, TimestampType

CORRUPT = "_corrupt_record"

#: Quarantine reasons (the ``reason`` column holds one of these, ``missing_field`` with a name).
REASON_NULL_VALUE = "null_value"
REASON_MALFORMED = "malformed_json"
REASON_MISSING = "missing_field"

#: Columns of every quarantine table.
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


def _reason(contract: JsonContract) -> Column:
    reason = F.when(F.col("value").isNull(), F.lit(REASON_NULL_VALUE)).when(
        F.col(f"_parsed.{CORRUPT}").isNotNull() | F.col("_parsed").isNull(), F.lit(REASON_MALFORMED)
    )
    for name in contract.required:
        reason = reason.when(F.col(f"_parsed.{name}").isNull(), F.lit(f"{REASON_MISSING}:{name}"))
    return reason


def parse_json(df: DataFrame, contract: JsonContract) -> Parsed:
    """Split a stamped DataFrame (``value`` plus source coordinates) into valid and quarantine.

    ``valid`` has the contract's fields followed by the source coordinates; ``quarantine`` has
    :data:`QUARANTINE_COLUMNS`. A value that is not JSON, has a field of the wrong type, or
    lacks a required field is quarantined; the two outputs partition the input exactly.
    """
    schema = StructType([*contract.schema.fields, StructField(CORRUPT, StringType())])
    options = {"mode": "PERMISSIVE", "columnNameOfCorruptRecord": CORRUPT}
    coords = [c for c in ("topic", "partition", "offset", "kafka_timestamp") if c in df.columns]
    parsed = df.withColumn("_parsed", F.from_json("value", schema, options)).withColumn(
        "_reason", _reason(contract)
    )
    valid = parsed.where(F.col("_reason").isNull()).select(
        *[F.col(f"_parsed.{f}").alias(f) for f in contract.schema.fieldNames()], *coords
    )
    quarantine = parsed.where(F.col("_reason").isNotNull()).select(
        F.col("value").alias("raw_value"), F.col("_reason").alias("reason"), *coords
    )
    return Parsed(valid, quarantine)
