"""A job's start-up checks and output settings, from its flags (docs/design.md, "A job that
talks"): :func:`talk` sets what the job prints, :func:`check_input` checks brokers and input
topic before any JVM starts, :func:`check_locations` its table and checkpoint (local ones
before the JVM, those on object storage once the session holds their settings).
"""

from __future__ import annotations

import argparse
import atexit
import os
import shutil
import sys
import tempfile
from pathlib import Path

from jobs.console import configure_logging, install, watch_interrupts
from spark_ext import preflight, storage
from spark_ext.crash import STEP_DIR_ENV

__all__ = [
    "add_output_flags",
    "check_input",
    "check_locations",
    "talk",
]


def add_output_flags(parser: argparse.ArgumentParser) -> None:
    """``--traceback`` and ``--verbose``, which every job takes."""
    parser.add_argument("--traceback", action="store_true", help="a typed error's whole trace")
    parser.add_argument("--verbose", action="store_true", help="other libraries' INFO lines")


def talk(args: argparse.Namespace) -> str:
    """Logging, the typed-error hook, Ctrl-C and the step folder (each batch's line names the
    last step its driver reached) for the job ``sys.argv[0]`` names; its name."""
    prog = Path(sys.argv[0]).stem
    steps = tempfile.mkdtemp(prefix="spark-ext-steps-")
    os.environ[STEP_DIR_ENV] = steps  # before the JVM starts: its Python workers see it
    atexit.register(shutil.rmtree, steps, True)
    configure_logging(getattr(args, "verbose", False))
    install(prog, getattr(args, "traceback", False))
    watch_interrupts(prog, None)
    return prog


def check_input(args: argparse.Namespace, bootstrap: str) -> None:
    """A reachable broker and an existing input topic (the location flags are absolute
    already: :func:`jobs.startup.location`)."""
    preflight.require_brokers(bootstrap)
    preflight.require_topics(bootstrap, [args.topic])


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
