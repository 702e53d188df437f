"""Helpers of the library's job tests: ``jobs.ordering_dedup`` run in this process."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from tests.conftest import await_done

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from jobs.ordering_dedup import PipelineOptions


def run_pipeline(
    spark: SparkSession,
    bootstrap: str,
    topic: str,
    root: Path,
    options: PipelineOptions | None = None,
) -> DataFrame:
    """Run ``jobs.ordering_dedup`` over all of ``topic`` into ``root`` (restarting from its
    checkpoint if there is one), fail unless it ends cleanly; return its EWMA table."""
    from jobs.ordering_dedup import PipelineOptions, PipelinePaths, start_pipeline

    paths = PipelinePaths(root)
    query, _ = start_pipeline(spark, bootstrap, topic, paths, options or PipelineOptions())
    await_done(query, 600)
    assert query.exception() is None
    return spark.read.format("delta").load(str(paths.ewma))
