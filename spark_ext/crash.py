"""Fault points: declared places in a protocol where a test or the harness injects a fault,
requested as ``SPARK_EXT_FAULT=<point>[@<batch>][#<partition>][:<kind>[=<seconds>]]``
(docs/design.md, "Fault points").

>>> p = declare("demo.1.written", "driver", "demo: rows written, marker not yet")
>>> FaultSpec.parse("demo.1.written@3:raise")
FaultSpec(point='demo.1.written', batch=3, kind=<FaultKind.RAISE: 'raise'>, seconds=0.0, partition=None)
>>> p.reached(3)   # nothing requested: returns at once
"""

from __future__ import annotations

import contextlib
import enum
import json
import logging
import os
import signal
import sys
import time
from dataclasses import dataclass
from typing import Any, Literal

from spark_ext.errors import ConfigError, SparkExtError

__all__ = [
    "FAULT_ENV",
    "FAULT_LOG_ENV",
    "FAULT_SETTINGS",
    "JOB_SESSION_ENV",
    "REACHED",
    "STEP_DIR_ENV",
    "TRACE_ENV",
    "FaultKind",
    "FaultPoint",
    "FaultSpec",
    "InjectedFault",
    "Side",
    "declare",
    "declared",
    "executor_environment",
    "fault_log_entries",
    "kill_job",
    "last_reached",
    "lookup",
]

log = logging.getLogger(__name__)

FAULT_ENV = "SPARK_EXT_FAULT"
#: A file to which every fired fault appends one JSON line.
FAULT_LOG_ENV = "SPARK_EXT_FAULT_LOG"
#: ``1``: every point reached appends a ``reached`` line to the fault log, fault or not.
TRACE_ENV = "SPARK_EXT_FAULT_TRACE"
#: The ``kind`` of a fault-log line that records a point reached, not a fault fired.
REACHED = "reached"
#: Set by :func:`spark_ext.jobrun.run_job`: this process tree is a job session of its own.
JOB_SESSION_ENV = "SPARK_EXT_JOB_SESSION"
#: A folder where every driver-side point reached writes its name to a file named for its batch.
STEP_DIR_ENV = "SPARK_EXT_STEP_DIR"
#: The environment variables that ask a job for a fault (passed on to executors).
FAULT_SETTINGS = (FAULT_ENV, FAULT_LOG_ENV, TRACE_ENV)

Side = Literal["driver", "executor", "any"]


class FaultKind(enum.Enum):
    """What an injected fault does (docs/design.md, "Fault points")."""

    KILL = "kill"
    RAISE = "raise"
    SLEEP = "sleep"


class InjectedFault(SparkExtError, RuntimeError):
    """Raised by a ``raise`` fault point: the failure a test asked for, never a real one."""

    def __init__(self, point: str, batch_id: int | None) -> None:
        self.point = point
        self.batch_id = batch_id
        super().__init__(f"injected fault at {point} (batch {batch_id})")


@dataclass(frozen=True)
class FaultSpec:
    """A parsed ``SPARK_EXT_FAULT`` value (``None`` batch or partition: any)."""

    point: str
    batch: int | None = None
    kind: FaultKind = FaultKind.KILL
    seconds: float = 0.0
    partition: int | None = None

    @classmethod
    def parse(cls, spec: str) -> FaultSpec:
        """Parse ``<point>[@<batch>][#<partition>][:<kind>[=<seconds>]]``; a bad spec is a
        :class:`ConfigError`."""
        where, _, how = spec.partition(":")
        where, _, partition = where.partition("#")
        point, _, batch = where.partition("@")
        kind_name, _, arg = how.partition("=")
        try:
            kind = FaultKind(kind_name or "kill")
            seconds = float(arg) if arg else 0.0
            batch_id = int(batch) if batch else None
            partition_id = int(partition) if partition else None
        except ValueError:
            raise ConfigError(
                FAULT_ENV,
                f"{spec!r} is not <point>[@<batch>][#<partition>][:kill|raise|sleep=<seconds>]",
            ) from None
        if not point or (kind is FaultKind.SLEEP) != bool(arg):
            raise ConfigError(FAULT_ENV, f"{spec!r}: sleep takes =<seconds>, other kinds none")
        return cls(point, batch_id, kind, seconds, partition_id)

    def __str__(self) -> str:
        out = self.point + (f"@{self.batch}" if self.batch is not None else "")
        out += f"#{self.partition}" if self.partition is not None else ""
        if self.kind is FaultKind.SLEEP:
            return f"{out}:sleep={self.seconds:g}"
        return out if self.kind is FaultKind.KILL else f"{out}:{self.kind.value}"

    def matches(self, point: str, batch_id: int | None) -> bool:
        """This point in this batch; with a partition, only in a task of that partition."""
        if point != self.point:
            return False
        if self.batch is not None and batch_id is not None and self.batch != batch_id:
            return False
        return self.partition is None or self.partition == _task_partition()


@dataclass(frozen=True)
class FaultPoint:
    """A place right after a step's durable effect where a fault can be injected: ``name``
    (``<owner>.<number>.<step>`` for protocol steps, unique), the ``side`` it runs on, and
    ``doc``: what is durable there and what is not yet."""

    name: str
    side: Side
    doc: str = ""

    def __str__(self) -> str:
        return self.name

    def armed(self, batch_id: int | None = None) -> bool:
        """Whether a fault is requested at this point (for ``batch_id``), for work only a
        fault needs."""
        return self._requested(batch_id) is not None

    def _requested(self, batch_id: int | None) -> FaultSpec | None:
        """The requested fault (``SPARK_EXT_FAULT``) if it is this point's in ``batch_id``."""
        raw = os.environ.get(FAULT_ENV)
        spec = FaultSpec.parse(raw) if raw else None
        return spec if spec is not None and spec.matches(self.name, batch_id) else None

    def reached(self, batch_id: int | None = None) -> None:
        """The step is done for ``batch_id``: fire the requested fault if it is this one."""
        folder = os.environ.get(STEP_DIR_ENV)
        if folder and _task() is None:  # a driver-side step: its batch's file (last_reached)
            step = os.path.join(folder, str(batch_id))
            with contextlib.suppress(OSError), open(step, "w", encoding="utf-8") as f:
                f.write(self.name)
        if os.environ.get(TRACE_ENV) == "1":
            _append(self, REACHED, batch_id, _task_attempt())
        spec = self._requested(batch_id)
        if spec is None:
            return
        attempt = _task_attempt()
        if spec.kind is not FaultKind.KILL and attempt not in (None, 0):
            return  # raise/sleep in a task: attempt 0 only, the retry runs clean
        log.warning(
            "fault %s at %s (batch %s, attempt %s)", spec.kind.value, self, batch_id, attempt
        )
        sys.stderr.write(f"SPARK_EXT_FAULT {self} kind={spec.kind.value} batch={batch_id}\n")
        sys.stderr.flush()
        _append(self, spec.kind.value, batch_id, attempt)
        if spec.kind is FaultKind.KILL:
            kill_job(self.name, batch_id)
        elif spec.kind is FaultKind.SLEEP:
            time.sleep(spec.seconds)
        else:
            raise InjectedFault(self.name, batch_id)


_DECLARED: dict[str, FaultPoint] = {}


def last_reached(batch_id: int) -> str | None:
    """The last driver-side point reached in batch ``batch_id`` (in any process of the
    driver's host: a Python writer's commit runs in one of its own); its file is removed."""
    path = os.path.join(os.environ.get(STEP_DIR_ENV, ""), str(batch_id))
    if STEP_DIR_ENV not in os.environ:
        return None
    try:
        with open(path, encoding="utf-8") as f:
            point = f.read()
        os.remove(path)
    except OSError:
        return None
    return point or None


def declare(name: str, side: Side, doc: str = "") -> FaultPoint:
    """Declare the fault point ``name`` (once; a second declaration must be identical)."""
    point = FaultPoint(name, side, doc)
    known = _DECLARED.setdefault(name, point)
    if known.side != side:
        raise ValueError(f"fault point {name!r} declared twice with sides {known.side}/{side}")
    return known


def declared(prefix: str = "") -> list[FaultPoint]:
    """Every fault point declared so far (by imported modules) whose name starts with ``prefix``."""
    return sorted((p for n, p in _DECLARED.items() if n.startswith(prefix)), key=lambda p: p.name)


def lookup(name: str) -> FaultPoint:
    """The declared point ``name``; :class:`KeyError` naming the known ones otherwise."""
    try:
        return _DECLARED[name]
    except KeyError:
        raise KeyError(
            f"no fault point {name!r} (declared: {', '.join(sorted(_DECLARED))})"
        ) from None


def fault_log_entries(path: str | os.PathLike[str]) -> list[dict[str, object]]:
    """The faults recorded in a ``SPARK_EXT_FAULT_LOG`` file, oldest first ([] if none fired)."""
    try:
        with open(path, encoding="utf-8") as f:
            return [json.loads(line) for line in f if line.strip()]
    except FileNotFoundError:
        return []


def _task() -> Any:
    """The context of the Spark task this runs in, ``None`` on the driver."""
    if "pyspark" not in sys.modules:
        return None
    from pyspark import TaskContext

    return TaskContext.get()


def _task_partition() -> int | None:
    return None if (ctx := _task()) is None else ctx.partitionId()


def _task_attempt() -> int | None:
    return None if (ctx := _task()) is None else ctx.attemptNumber()


def _append(point: FaultPoint, kind: str, batch_id: int | None, attempt: int | None) -> None:
    """Append one JSON line to the fault log, if ``SPARK_EXT_FAULT_LOG`` names one."""
    path = os.environ.get(FAULT_LOG_ENV)
    if path:
        entry = {
            "point": point.name,
            "kind": kind,
            "batch": batch_id,
            "side": "driver" if attempt is None else "executor",
            "attempt": attempt,
            "partition": None if attempt is None else _task_partition(),
            "pid": os.getpid(),
        }
        with open(path, "a", encoding="utf-8") as f:  # one short line: an atomic append
            f.write(json.dumps(entry) + "\n")
            f.flush()
            os.fsync(f.fileno())


def executor_environment() -> dict[str, str]:
    """The fault settings of this process (:data:`FAULT_SETTINGS`) an executor must see too."""
    return {k: os.environ[k] for k in FAULT_SETTINGS if k in os.environ}


def kill_job(name: str, batch_id: int | None) -> None:
    """SIGKILL the whole job from wherever this runs: driver, executor task, or writer commit."""
    sys.stderr.write(f"SPARK_EXT_CRASH {name} batch={batch_id}\n")
    sys.stderr.flush()
    session, group = os.getsid(0), os.getpgid(0)
    if os.environ.get(JOB_SESSION_ENV) == "1" and session != group:
        os.killpg(session, signal.SIGKILL)  # the session leader's group: driver and JVM
    os.killpg(group, signal.SIGKILL)
