"""What every guarantee job does first and last, written once: flags, session, paths, report.

:func:`job_parser` declares the shared flags, :func:`start_job` turns them into a
:class:`JobStart`, :class:`JobPaths` names the tables under ``--out``, :func:`start_batches`
starts a ``foreachBatch`` query, :meth:`JobStart.print_tables` reports the tables.
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, overload

from jobs.console import watch_interrupts
from jobs.preflight import add_output_flags, check_input, check_locations, talk

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.streaming import StreamingQuery

    from spark_ext.config import Profile

__all__ = [
    "JobPaths",
    "JobStart",
    "Under",
    "job_parser",
    "sink_id_for",
    "start_batches",
    "start_job",
]


def job_parser(
    description: str, topic: str, out: bool = True, max_offsets: int | None = None
) -> argparse.ArgumentParser:
    """An argument parser with the flags every job shares; add the job's own to it.

    ``out=False`` leaves ``--out`` out (a job that names its table and checkpoint itself);
    ``max_offsets`` is the default of ``--max-offsets-per-trigger``.
    """
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--profile", default="local", help="conf/ profile name or .toml path")
    parser.add_argument("--bootstrap", default=None, help="overrides the profile's brokers")
    parser.add_argument("--topic", default=topic, help="the input topic")
    if out:
        parser.add_argument("--out", type=Path, default=None, help="folder of tables + checkpoint")
    parser.add_argument(
        "--max-offsets-per-trigger", type=int, default=max_offsets, help="Kafka offsets per batch"
    )
    add_output_flags(parser)
    return parser


class Under:
    """A folder below a :class:`JobPaths`' root: ``events = Under("events")`` is ``root/events``."""

    def __init__(self, name: str) -> None:
        self.name = name

    @overload
    def __get__(self, paths: None, owner: type) -> Under: ...
    @overload
    def __get__(self, paths: JobPaths, owner: type | None = None) -> Path: ...
    def __get__(self, paths: JobPaths | None, owner: type | None = None) -> Path | Under:
        return self if paths is None else paths.root / self.name


@dataclass(frozen=True)
class JobPaths:
    """A job's tables and Spark's checkpoint under one folder (``--out``); a job's subclass
    names its tables with :class:`Under`."""

    root: Path
    checkpoint = Under("_checkpoint")


@dataclass(frozen=True)
class JobStart:
    """A started job: its profile, session, brokers, output folder and input (``--topic``,
    ``--max-offsets-per-trigger``)."""

    profile: Profile
    spark: SparkSession
    bootstrap: str
    out: Path
    topic: str
    max_offsets_per_trigger: int | None

    def source(self) -> DataFrame:
        """The input topic as a stream of stamped Kafka rows."""
        from connectors.kafka import read_stream

        limit = self.max_offsets_per_trigger
        return read_stream(self.spark, self.bootstrap, self.topic, max_offsets_per_trigger=limit)

    def print_tables(self, job: str, **tables: Path) -> None:
        """Print each Delta table's path and row count, ``<job>: <name> table <path>: <n> rows``."""
        for name, path in tables.items():
            rows = self.spark.read.format("delta").load(str(path)).count()
            print(f"{job}: {name} table {path}: {rows} rows")


def start_job(
    args: argparse.Namespace,
    default_folder: str,
    *,
    check: Callable[[str], object] | None = None,
    **overrides: Any,
) -> JobStart:
    """Logging, the profile (with ``overrides``, as :func:`~spark_ext.config.load_profile`
    takes them), the brokers and input (:mod:`jobs.preflight`, then ``check``, before any JVM
    starts), the session (with :class:`~spark_ext.metrics.ProgressListener` and Ctrl-C
    handling) and the output folder (``--out`` or ``<data root>/<default_folder>``)."""
    prog = talk(args)
    from spark_ext.config import load_profile
    from spark_ext.metrics import ProgressListener
    from spark_ext.session import build_session

    profile = load_profile(args.profile, **overrides)
    bootstrap = args.bootstrap or profile.kafka.bootstrap_servers
    check_input(args, bootstrap)
    if check is not None:
        check(bootstrap)
    out = getattr(args, "out", None)
    if not isinstance(out, Path):
        out = profile.paths.resolved_data_root() / default_folder
    check_locations(args, out, remote=False)
    spark = build_session(profile)
    ProgressListener.attach(spark)
    watch_interrupts(prog, spark)
    check_locations(args, out, remote=True)
    return JobStart(profile, spark, bootstrap, out, args.topic, args.max_offsets_per_trigger)


def sink_id_for(prefix: str, topic: str) -> str:
    """``<prefix>.<topic>`` with every character a sink id may not hold replaced by ``_``."""
    return f"{prefix}." + re.sub(r"[^A-Za-z0-9_.]", "_", topic)


def start_batches(
    df: DataFrame,
    write: Callable[[DataFrame, int], None],
    checkpoint: Path,
    name: str | None = None,
    every: str | None = None,
    output_mode: str = "append",
) -> StreamingQuery:
    """Start ``write`` as ``df``'s ``foreachBatch`` function from ``checkpoint``: a batch
    ``every`` interval, or by default ``availableNow`` (it stops once its input is read)."""
    writer = df.writeStream.foreachBatch(write).outputMode(output_mode)
    if name is not None:
        writer = writer.queryName(name)
    writer = writer.option("checkpointLocation", str(checkpoint))
    trigger = writer.trigger(processingTime=every) if every else writer.trigger(availableNow=True)
    return trigger.start()
