"""Local server processes (the Kafka broker, the S3 store, a Spark cluster's daemons): each
launched in a session of its own with a pid file, found alive by its pid, stopped by signal."""

from __future__ import annotations

import argparse
import logging
import os
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from spark_ext.jvm import java

__all__ = ["alive", "command_line", "java", "port_open", "read_pid", "spawn", "stop_pid"]


def port_open(host: str, port: int, timeout: float = 0.5) -> bool:
    """Whether something accepts TCP connections on ``host:port``."""
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def alive(pid: int, child: subprocess.Popen[bytes] | None = None) -> bool:
    """Whether ``pid`` still runs: a zombie does not, and a dead child of this process is
    reaped (``child``: its ``Popen``, if this object started it)."""
    if child is not None and child.pid == pid:
        return child.poll() is None
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a zombie child started by another object of this process
        done, _ = os.waitpid(pid, os.WNOHANG)
        return done == 0
    except ChildProcessError:  # not our child: read its state
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            return False
        return stat.rpartition(")")[2].split()[0] != "Z"


def read_pid(
    pid_file: Path, marker: str | None = None, child: subprocess.Popen[bytes] | None = None
) -> int | None:
    """The live pid in ``pid_file`` (:func:`alive`); ``None`` for no file, a dead process, or
    (with ``marker``) a pid reused by a program whose command line does not hold ``marker``."""
    try:
        pid = int(pid_file.read_text().strip())
        if marker is not None and marker.encode() not in Path(f"/proc/{pid}/cmdline").read_bytes():
            return None
    except (FileNotFoundError, ValueError, ProcessLookupError):
        return None
    return pid if alive(pid, child) else None


def spawn(
    cmd: Sequence[str], env: Mapping[str, str], output: Path, pid_file: Path
) -> subprocess.Popen[bytes]:
    """Start ``cmd`` in a session of its own, its output appended to ``output``; writes its pid."""
    with open(output, "ab") as out:
        proc = subprocess.Popen(
            list(cmd), stdout=out, stderr=subprocess.STDOUT, env=dict(env), start_new_session=True
        )
    pid_file.write_text(f"{proc.pid}\n")
    return proc


def stop_pid(
    pid: int,
    timeout: float = 30.0,
    hard: bool = False,
    child: subprocess.Popen[bytes] | None = None,
) -> None:
    """SIGTERM ``pid`` (SIGKILL with ``hard``, or past ``timeout``) and wait until it is gone."""
    if not hard:
        os.kill(pid, signal.SIGCONT)  # a paused process cannot handle SIGTERM
    os.kill(pid, signal.SIGKILL if hard else signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while alive(pid, child):
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            deadline = float("inf")
        time.sleep(0.1)


def command_line(name: str, server: Callable[[Path | None, int | None], Any]) -> None:
    """``python -m ... start|stop|status [--data-dir DIR] [--port N]`` of the local ``name``
    (``server``: made from the options, ``None`` where not given)."""
    parser = argparse.ArgumentParser(description=f"Run the local {name}.")
    parser.add_argument("action", choices=["start", "stop", "status"])
    parser.add_argument("--data-dir", type=Path)
    parser.add_argument("--port", type=int)
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    logging.getLogger("kafka").setLevel(logging.WARNING)
    made = server(args.data_dir, args.port)
    if args.action == "start":
        endpoint = made.start()
        print(f"{name}: {endpoint} (pid {made.pid()}, data {made.config.data_dir})")
    elif args.action == "stop":
        made.stop()
        print(f"{name}: stopped")
    else:
        print(f"{name}: {'running' if made.is_running() else 'not running'} (pid {made.pid()})")
