"""What every guarantee job does first, written once: its flags, profile, session, listener, paths.

Every job takes the same flags for the same things: ``--profile`` (a ``conf/`` name or a
``.toml`` path), ``--bootstrap`` (overrides the profile's brokers), ``--topic``, ``--out``
(the folder of its tables and checkpoint; default under the profile's data root) and
``--max-offsets-per-trigger``. :func:`job_parser` declares them, :func:`start_job` turns the
parsed flags into a :class:`JobStart` (the profile, the session with the progress listener
attached, the brokers, the output folder).

Example
-------
>>> parser = job_parser("my job", topic="events")
>>> args = parser.parse_args(["--max-offsets-per-trigger", "50"])
>>> (args.profile, args.topic, args.max_offsets_per_trigger)
('local', 'events', 50)
"""

from __future__ import annotations

import argparse
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from spark_ext.config import Profile

__all__ = ["JobStart", "job_parser", "start_job"]


def job_parser(description: str, topic: str) -> argparse.ArgumentParser:
    """An argument parser with the flags every job shares; add the job's own to it."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--profile", default="local", help="conf/ profile name or .toml path")
    parser.add_argument("--bootstrap", default=None, help="overrides the profile's brokers")
    parser.add_argument("--topic", default=topic, help="the input topic")
    parser.add_argument("--out", type=Path, default=None, help="folder of tables + checkpoint")
    parser.add_argument(
        "--max-offsets-per-trigger", type=int, default=None, help="Kafka offsets per batch"
    )
    return parser


@dataclass(frozen=True)
class JobStart:
    """A started job: its profile, session, brokers and output folder."""

    profile: Profile
    spark: SparkSession
    bootstrap: str
    out: Path


def start_job(args: argparse.Namespace, default_folder: str) -> JobStart:
    """Logging, the profile, the session (with :class:`~spark_ext.metrics.ProgressListener`),
    the brokers and the output folder (``--out`` or ``<data root>/<default_folder>``)."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    from spark_ext.config import load_profile
    from spark_ext.metrics import ProgressListener
    from spark_ext.session import build_session

    profile = load_profile(args.profile)
    spark = build_session(profile)
    ProgressListener.attach(spark)
    return JobStart(
        profile=profile,
        spark=spark,
        bootstrap=args.bootstrap or profile.kafka.bootstrap_servers,
        out=args.out or profile.paths.resolved_data_root() / default_folder,
    )
