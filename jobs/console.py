"""What a job says to its user (:func:`talk` sets it up): its own log lines only, a typed error
as one line with its fix, Ctrl-C as one line after the batch in flight (docs/design.md, "A job
that talks")."""

from __future__ import annotations

import argparse
import atexit
import logging
import os
import re
import shutil
import signal
import sys
import tempfile
import threading
import time
import traceback
from pathlib import Path
from types import FrameType, TracebackType
from typing import TYPE_CHECKING, NoReturn

from spark_ext.crash import STEP_DIR_ENV
from spark_ext.errors import SparkExtError
from spark_ext.jobrun import JOB_LOG_FORMAT

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from pyspark.sql.streaming import StreamingQuery

log = logging.getLogger(__name__)

#: The exit code of a job stopped by Ctrl-C (a shell's 128 + SIGINT).
INTERRUPTED = 130
#: The project's loggers, at INFO; every other library's from WARNING on unless ``--verbose``.
OWN_LOGGERS = ("spark_ext", "connectors", "jobs", "__main__")


def configure_logging(verbose: bool = False) -> None:
    """The project's INFO lines (one per batch among them); other libraries' only from WARNING
    on (kafka-python's from ERROR on) unless ``verbose``."""
    logging.basicConfig(level=logging.INFO if verbose else logging.WARNING, format=JOB_LOG_FORMAT)
    for name in OWN_LOGGERS:
        logging.getLogger(name).setLevel(logging.INFO)
    if not verbose:  # kafka-python warns of its own slow event loop on a busy machine
        logging.getLogger("kafka").setLevel(logging.ERROR)
        logging.getLogger("py4j").setLevel(logging.WARNING)


def _typed(cls: type[SparkExtError] = SparkExtError) -> dict[str, type[SparkExtError]]:
    """Every :class:`~spark_ext.errors.SparkExtError` class imported so far, by name."""
    found = {cls.__name__: cls}
    for sub in cls.__subclasses__():
        found.update(_typed(sub))
    return found


_RAISED = re.compile(r"^\s*(?:[\w.]+\.)?(\w+): (.+)$")


def error_line(exc: BaseException) -> str | None:
    """``<ErrorClass>: <message>; fix: <fix>`` for a typed error, also one raised in a batch
    (found by its class name in Spark's query exception); ``None`` for any other error."""
    if isinstance(exc, SparkExtError):
        name, message, fix = type(exc).__name__, str(exc), exc.fix
    else:
        typed, found = _typed(), None
        for line in str(exc).splitlines():
            m = _RAISED.match(line)
            if m and m.group(1) in typed:
                found = m  # the last one: the error that ended the batch
        if found is None:
            return None
        name, message = found.group(1), found.group(2)
        fix = typed[name].fix
    return f"{name}: {message}" + (f"; fix: {fix}" if fix else "")


#: Spark's error when a Python worker it started did not connect back within its fixed 10 s.
WORKER_TIMEOUT = "Python worker failed to connect back"
#: How often a job restarts itself after :data:`WORKER_TIMEOUT` (counted in the environment).
RESTARTS_ENV, MAX_RESTARTS = "SPARK_EXT_JOB_RESTARTS", 2


def restart_after_worker_timeout(prog: str, exc: BaseException) -> None:
    """Re-execute the job's command line in this process when ``exc`` is :data:`WORKER_TIMEOUT`,
    at most :data:`MAX_RESTARTS` times (docs/design.md, "A job that talks"); else return."""
    done = int(os.environ.get(RESTARTS_ENV, "0"))
    if WORKER_TIMEOUT not in str(exc) or done >= MAX_RESTARTS:
        return
    log.warning(
        "%s: Spark's Python worker did not connect back within Spark's 10 s (an overloaded "
        "machine); restarting from the checkpoint (%d of %d)",
        prog,
        done + 1,
        MAX_RESTARTS,
    )
    os.environ[RESTARTS_ENV] = str(done + 1)
    logging.shutdown()
    shutil.rmtree(os.environ.get(STEP_DIR_ENV, ""), ignore_errors=True)
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(sys.executable, sys.orig_argv)


def watch_interrupts(prog: str, spark: SparkSession | None) -> None:
    """Ctrl-C stops each active query after its batch in flight, then the session, logs one line
    and exits :data:`INTERRUPTED`; a second one exits at once (docs/design.md, "A job that
    talks")."""
    stopping = threading.Event()

    def handler(signum: int, frame: FrameType | None) -> NoReturn:
        if stopping.is_set():  # the second: no wait, no clean-up
            os._exit(INTERRUPTED)
        stopping.set()
        done: list[str] = []
        if spark is not None:  # from a thread: this one may be inside a gateway call
            worker = threading.Thread(target=_stop_after_batch, args=(spark, done), daemon=True)
            worker.start()
            worker.join()
        where = "; ".join(done) or "before its first batch"
        log.warning(
            "%s: interrupted (Ctrl-C): stopped %s; run it again to resume from its checkpoint",
            prog,
            where,
        )
        if spark is None:
            raise SystemExit(INTERRUPTED)
        logging.shutdown()  # no clean-up of the job's own: it would call the stopped gateway
        shutil.rmtree(os.environ.get(STEP_DIR_ENV, ""), ignore_errors=True)
        os._exit(INTERRUPTED)

    signal.signal(signal.SIGINT, handler)


def _last_batch(query: StreamingQuery) -> int:
    """The id of the query's last batch that reported progress (-1: none yet)."""
    progress = query.lastProgress
    return int(progress["batchId"]) if progress else -1


def _stop_after_batch(spark: SparkSession, done: list[str], wait_s: float = 600.0) -> None:
    """Stop each active query once its batch in flight reported progress (or no trigger is
    active), then the session; append ``<query> after batch <n>`` for each to ``done``."""
    for query in spark.streams.active:
        start = _last_batch(query)
        deadline = time.monotonic() + wait_s
        while query.isActive and time.monotonic() < deadline:
            if _last_batch(query) > start or not query.status["isTriggerActive"]:
                break
            time.sleep(0.1)
        last = _last_batch(query)
        query.stop()
        name = query.name or str(query.id)[:8]
        done.append(f"{name} after batch {last}" if last >= 0 else f"{name} before its first batch")
    spark.stop()  # its listener bus drained (the last batch lines) while this process answers


def talk(args: argparse.Namespace) -> str:
    """Set up logging, the typed-error hook, Ctrl-C and the step folder for the job
    ``sys.argv[0]`` names (``--verbose``, ``--traceback``); returns the job's name."""
    prog = Path(sys.argv[0]).stem
    steps = tempfile.mkdtemp(prefix="spark-ext-steps-")
    os.environ[STEP_DIR_ENV] = steps  # before the JVM starts: its Python workers see it
    atexit.register(shutil.rmtree, steps, True)
    configure_logging(getattr(args, "verbose", False))
    show_traceback = getattr(args, "traceback", False)

    def hook(kind: type[BaseException], exc: BaseException, tb: TracebackType | None) -> None:
        restart_after_worker_timeout(prog, exc)
        line = error_line(exc)
        if line is None or show_traceback:  # not ours: Python's whole trace
            traceback.print_exception(kind, exc, tb)
        if line is not None:
            log.error("%s: %s", prog, line)

    sys.excepthook = hook
    watch_interrupts(prog, None)
    return prog
