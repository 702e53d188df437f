"""What every guarantee job does first and last, written once: flags, checks, session, paths,
report. Tables and checkpoints are locations (:func:`location`), a local path or an ``s3a://``
URI (docs/design.md, "A job that talks" and "Object storage", jobs).
"""

from __future__ import annotations

import argparse
import os
import re
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, overload

from jobs.console import talk, watch_interrupts
from spark_ext import preflight, storage
from spark_ext.errors import ConfigError

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.streaming import StreamingQuery

    from spark_ext.config import Profile

#: Spark's checkpoint file manager setting (set to S3's when every location is on S3).
CHECKPOINT_MANAGER_CONF = "spark.sql.streaming.checkpointFileManagerClass"
#: ``--storage``: the profile's own paths, or the store of conf/s3.toml; its default's variable.
STORAGES = ("local", "s3")
STORAGE_ENV = "SPARK_EXT_STORAGE"


class JobLocation(str):
    """A table, checkpoint or output folder as Spark names it: an absolute local path or an
    ``s3a://`` URI (what :func:`location` makes of a flag)."""


def location(text: str) -> JobLocation:
    """A location flag's value (``type=location``): a path made absolute, ``s3://`` and
    ``s3n://`` as ``s3a://``; another scheme is a :class:`~spark_ext.errors.ConfigError`."""
    return JobLocation(storage.spark_uri(storage.Location.parse(text)))


def under(root: str, *names: str) -> JobLocation:
    """The location ``names`` below ``root``."""
    return JobLocation(storage.spark_uri(storage.Location.parse(root).join(*names)))


def default_storage() -> str:
    """``$SPARK_EXT_STORAGE``, else ``local``."""
    value = os.environ.get(STORAGE_ENV) or "local"
    if value not in STORAGES:
        raise ConfigError(STORAGE_ENV, f"{value!r} is not one of {', '.join(STORAGES)}")
    return value


def storage_overrides(kind: str, profile: str | None = None) -> dict[str, dict[str, Any]]:
    """The sections of ``profile`` that ``--storage kind`` replaces: none for ``local``,
    conf/s3.toml's ``[paths]`` and ``[storage]`` for ``s3``, but not the ``[storage]`` of a
    profile that sets one (a cluster's own store: docs/design.md, "Object storage")."""
    from spark_ext.config import load_profile
    from spark_ext.storage import StorageSettings

    if kind == "local":
        return {}
    s3 = load_profile("s3")
    sections = {"paths": asdict(s3.paths), "storage": asdict(s3.storage)}
    if profile is not None and load_profile(profile).storage != StorageSettings():
        del sections["storage"]
    return sections


def add_storage_flag(parser: argparse.ArgumentParser, what: str) -> None:
    """``--storage``: ``s3`` puts ``what`` in conf/s3.toml's store."""
    help = f"s3: {what} in conf/s3.toml's store, or the profile's own (default: ${STORAGE_ENV} or local)"
    parser.add_argument("--storage", choices=STORAGES, default=None, help=help)


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
    add_storage_flag(parser, "tables and checkpoints")
    if out:
        parser.add_argument(
            "--out", type=location, default=None, help="folder or URI of tables + checkpoint"
        )
    parser.add_argument(
        "--max-offsets-per-trigger", type=int, default=max_offsets, help="Kafka offsets per batch"
    )
    parser.add_argument("--traceback", action="store_true", help="a typed error's whole trace")
    parser.add_argument("--verbose", action="store_true", help="other libraries' INFO lines")
    return parser


class Under:
    """A folder below a :class:`JobPaths`' root: ``events = Under("events")`` is ``root/events``."""

    def __init__(self, name: str) -> None:
        self.name = name

    @overload
    def __get__(self, paths: None, owner: type) -> Under: ...
    @overload
    def __get__(self, paths: JobPaths, owner: type | None = None) -> JobLocation: ...
    def __get__(self, paths: JobPaths | None, owner: type | None = None) -> JobLocation | Under:
        return self if paths is None else under(paths.root, self.name)


@dataclass(frozen=True)
class JobPaths:
    """A job's tables and Spark's checkpoint under one folder (``--out``); a job's subclass
    names its tables with :class:`Under`."""

    root: str
    checkpoint = Under("_checkpoint")


@dataclass(frozen=True)
class JobStart:
    """A started job: its profile, session, brokers, output folder and input (``--topic``,
    ``--max-offsets-per-trigger``)."""

    profile: Profile
    spark: SparkSession
    bootstrap: str
    out: JobLocation
    topic: str
    max_offsets_per_trigger: int | None

    def source(self) -> DataFrame:
        """The input topic as a stream of stamped Kafka rows."""
        from connectors.kafka import read_stream

        return read_stream(self.spark, self.bootstrap, self.topic, self.max_offsets_per_trigger)

    def print_tables(self, job: str, **tables: str) -> None:
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
    """Start a job (docs/design.md, "A job that talks"): logging and Ctrl-C, the profile
    (``--storage``'s sections, then ``overrides``), the output folder (``--out`` or ``<data
    root>/<default_folder>``), the checks before the JVM (locations, brokers, input topic, then
    ``check``), the session, then the checks of locations on object storage."""
    prog = talk(args)
    from spark_ext.config import load_profile
    from spark_ext.metrics import ProgressListener
    from spark_ext.session import build_session

    kind = getattr(args, "storage", None) or default_storage()
    profile = load_profile(args.profile, **{**storage_overrides(kind, args.profile), **overrides})
    out = getattr(args, "out", None)
    locations = [v for v in vars(args).values() if isinstance(v, JobLocation)]
    if not isinstance(out, JobLocation):
        out = under(profile.paths.data_root_uri(), default_folder)
        if "out" in vars(args) and args.out is None:  # the job's --out, left to its default
            locations.append(out)
    for place in locations:  # a missing bucket, refused credentials, no endpoint: typed, here
        storage.check(place, profile.storage)
    bootstrap = args.bootstrap or profile.kafka.bootstrap_servers
    profile.kafka.configure_clients(bootstrap)
    preflight.require_brokers(bootstrap)
    preflight.require_topics(bootstrap, [args.topic])
    if check is not None:
        check(bootstrap)
    check_locations(args, out, remote=False)
    spark = build_session(profile)
    if locations and all(storage.Location.parse(p).is_s3 for p in locations):
        spark.conf.set(CHECKPOINT_MANAGER_CONF, storage.S3_CHECKPOINT_FILE_MANAGER)
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
    checkpoint: str,
    name: str | None = None,
    output_mode: str = "append",
) -> StreamingQuery:
    """Start ``write`` as ``df``'s ``foreachBatch`` function from ``checkpoint``,
    ``availableNow`` (it stops once its input is read)."""
    writer = df.writeStream.foreachBatch(write).outputMode(output_mode)
    if name is not None:
        writer = writer.queryName(name)
    writer = writer.option("checkpointLocation", str(checkpoint))
    return writer.trigger(availableNow=True).start()


def check_locations(args: argparse.Namespace, out: str | Path, remote: bool) -> None:
    """``--table`` empty, new or a Delta table; the checkpoint (``--checkpoint``, else
    ``<out>/_checkpoint``) new or written by a query of the same input topic. Only the
    locations on object storage if ``remote`` (the session holds their settings), else only
    the local ones (checked before the JVM starts)."""
    table = getattr(args, "table", None)
    if table is not None and storage.Location.parse(table).is_s3 == remote:
        preflight.require_table_folder(table)
    checkpoint = getattr(args, "checkpoint", None) or storage.Location.parse(str(out)).join(
        "_checkpoint"
    )
    if storage.Location.parse(checkpoint).is_s3 == remote:
        preflight.require_checkpoint_reads(checkpoint, [args.topic])
