"""Helpers of the tracked jobs' tests: the demo events as pandas, a table compared with them."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import pandas as pd

from jobs.tracker_windows import EPOCH

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession


def demo_events(n: int, step_ms: int) -> pd.DataFrame:
    """The events of ``jobs.tracker_windows.demo_records(n, ..., step_ms=step_ms)`` (7 users, no
    jitter): ``user``, ``t`` (epoch ms), ``amount`` and their 10 s window's ``window_start_ms``."""
    epoch_ms = int(EPOCH.timestamp() * 1000)
    rows = [
        {"user": f"u{i % 7}", "t": epoch_ms + i * step_ms, "amount": float(i % 13)}
        for i in range(n)
    ]
    df = pd.DataFrame(rows)
    df["window_start_ms"] = df["t"] // 10_000 * 10_000
    return df


def assert_table_is(spark: SparkSession, table: Path, expected: DataFrame) -> None:
    """The Delta table at ``table`` equals ``expected`` (chispa; rows and columns in any order,
    nullability aside)."""
    from chispa import assert_df_equality

    got = spark.read.format("delta").load(str(table))
    assert_df_equality(
        got, expected, ignore_row_order=True, ignore_nullable=True, ignore_column_order=True
    )
