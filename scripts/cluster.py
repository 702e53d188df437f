#!/usr/bin/env python3
"""A Spark standalone cluster on 127.0.0.1: one master and N workers, from the pyspark install.

Usage::

    python scripts/cluster.py start [--port 7077] [--workers 2] [--cores 1] [--memory 1g]
    python scripts/cluster.py start --worker-hosts 127.0.0.2,127.0.0.3   # a host per worker
    python scripts/cluster.py status|stop
    python scripts/cluster.py check --master spark://127.0.0.1:7077   # exit 0 if it answers

JVMs started with pyspark's ``bin/spark-class``, each in its own process group, pid and log
files under ``--dir``; ``start`` returns once every worker is ALIVE; ``stop`` also removes the
workers' application folders. ``--worker-hosts`` needs 127.0.0.0/8 on ``lo`` (macOS:
``ifconfig lo0 alias 127.0.0.2``); why: README, the paragraph on ``--worker-hosts``.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
log = logging.getLogger("cluster")


def spark_home() -> Path:
    """The pyspark package folder: it holds ``bin/spark-class`` and the Spark jars."""
    import pyspark

    return Path(pyspark.__file__).resolve().parent


@dataclass(frozen=True)
class ClusterConfig:
    """Where and how big the cluster is."""

    folder: Path = ROOT / "var" / "cluster"
    host: str = "127.0.0.1"
    port: int = 7077
    webui_port: int = 8080
    workers: int = 2
    cores: int = 1
    memory: str = "1g"
    #: One address per worker; empty: every worker on :attr:`host`.
    worker_hosts: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.worker_hosts and len(self.worker_hosts) != self.workers:
            raise SystemExit(
                f"{self.workers} workers but {len(self.worker_hosts)} worker hosts "
                f"({','.join(self.worker_hosts)}): give one host per worker"
            )

    def worker_host(self, i: int) -> str:
        return self.worker_hosts[i] if self.worker_hosts else self.host

    @property
    def master_url(self) -> str:
        return f"spark://{self.host}:{self.port}"

    @property
    def state_file(self) -> Path:
        return self.folder / "cluster.json"


class StandaloneCluster:
    """Start, wait for and stop a master and its workers by their pids."""

    def __init__(self, config: ClusterConfig) -> None:
        self.config = config

    def _env(self, host: str) -> dict[str, str]:
        env = dict(os.environ)
        python = str(ROOT / ".venv" / "bin" / "python")
        if not Path(python).exists():
            python = sys.executable
        env.update(
            SPARK_HOME=str(spark_home()),
            SPARK_LOCAL_IP=host,
            PYSPARK_PYTHON=python,
            SPARK_LOG_DIR=str(self.config.folder / "logs"),
            SPARK_DAEMON_MEMORY="512m",
            PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")])),
        )
        return env

    def _launch(self, name: str, args: list[str], host: str) -> int:
        logs = self.config.folder / "logs"
        logs.mkdir(parents=True, exist_ok=True)
        cmd = [str(spark_home() / "bin" / "spark-class"), *args]
        with open(logs / f"{name}.log", "ab") as out:
            proc = subprocess.Popen(
                cmd,
                cwd=self.config.folder,
                env=self._env(host),
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        log.info("%s: pid %d", name, proc.pid)
        return proc.pid

    def pids(self) -> dict[str, int]:
        try:
            return {k: int(v) for k, v in json.loads(self.config.state_file.read_text()).items()}
        except FileNotFoundError:
            return {}

    def master_state(self) -> dict[str, object] | None:
        """The master's JSON status page, or ``None`` when no master answers."""
        url = f"http://{self.config.host}:{self.config.webui_port}/json/"
        try:
            with urllib.request.urlopen(url, timeout=5) as resp:
                return dict(json.load(resp))
        except OSError:
            return None

    def alive_workers(self) -> int:
        """Workers the master lists as ALIVE (0 if the master does not answer)."""
        return len(self.alive_worker_hosts())

    def alive_worker_hosts(self) -> list[str]:
        """The host of each worker the master lists as ALIVE (none if it does not answer)."""
        info = self.master_state()
        workers = info.get("workers", []) if info else []
        return [
            str(w.get("host")) for w in workers if isinstance(w, dict) and w.get("state") == "ALIVE"
        ]

    def remove_application_folders(self) -> int:
        """Remove the workers' per-application folders (``worker-*/app-*``); their count."""
        apps = sorted(self.config.folder.glob("worker-*/app-*"))
        for app in apps:
            shutil.rmtree(app, ignore_errors=True)
        return len(apps)

    def master_info(self) -> dict[str, object]:
        url = f"http://{self.config.host}:{self.config.webui_port}/json/"
        with urllib.request.urlopen(url, timeout=5) as resp:
            return dict(json.load(resp))

    def start(self, timeout_s: float = 180.0) -> None:
        c = self.config
        if any(_alive(p) for p in self.pids().values()):
            raise SystemExit(f"a cluster is already running from {c.folder}; stop it first")
        c.folder.mkdir(parents=True, exist_ok=True)
        pids = {
            "master": self._launch(
                "master",
                [
                    "org.apache.spark.deploy.master.Master",
                    *("--host", c.host, "--port", str(c.port)),
                    *("--webui-port", str(c.webui_port)),
                ],
                c.host,
            )
        }
        for i in range(c.workers):
            work = c.folder / f"worker-{i}"
            work.mkdir(exist_ok=True)
            pids[f"worker-{i}"] = self._launch(
                f"worker-{i}",
                [
                    "org.apache.spark.deploy.worker.Worker",
                    *("--host", c.worker_host(i), "--cores", str(c.cores)),
                    *("--memory", c.memory, "--work-dir", str(work), "--webui-port", "0"),
                    c.master_url,
                ],
                c.worker_host(i),
            )
        c.state_file.write_text(json.dumps(pids))
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.alive_workers() == c.workers:
                log.info("cluster up: %s with %d workers", c.master_url, c.workers)
                return
            dead = [n for n, p in pids.items() if not _alive(p)]
            if dead:
                self.stop()
                raise SystemExit(f"{dead} exited; see {c.folder / 'logs'}")
            time.sleep(1)
        self.stop()
        raise SystemExit(f"workers not ALIVE after {timeout_s}s; see {c.folder / 'logs'}")

    def stop(self, timeout_s: float = 30.0) -> None:
        pids = self.pids()
        for name, pid in sorted(pids.items(), reverse=True):  # workers first
            _signal_group(pid, signal.SIGTERM)
            log.info("stopping %s (pid %d)", name, pid)
        deadline = time.monotonic() + timeout_s
        while any(_alive(p) for p in pids.values()) and time.monotonic() < deadline:
            time.sleep(0.5)
        for pid in pids.values():
            _signal_group(pid, signal.SIGKILL)
        self.config.state_file.unlink(missing_ok=True)
        removed = self.remove_application_folders()
        if removed:
            log.info("removed %d application folders (their jars) from the work dirs", removed)


def master_reachable(url: str, timeout_s: float = 3.0) -> bool:
    """Whether something accepts connections at a ``spark://host:port`` master URL."""
    host, _, port = url.removeprefix("spark://").partition(":")
    try:
        with socket.create_connection((host, int(port or 7077)), timeout=timeout_s):
            return True
    except (OSError, ValueError):
        return False


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a zombie child of ours is not alive
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ", 1)[1][0] != "Z"
    except OSError:
        return True


def _signal_group(pid: int, sig: signal.Signals) -> None:
    try:
        os.killpg(pid, sig)  # the launcher's whole group: bash spark-class and its JVM
    except ProcessLookupError:
        pass


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("command", choices=["start", "stop", "status", "check"])
    parser.add_argument("--master", default=None, help="check: the spark:// URL to try")
    parser.add_argument("--dir", type=Path, default=ClusterConfig.folder)
    parser.add_argument("--port", type=int, default=7077)
    parser.add_argument("--webui-port", type=int, default=8080)
    parser.add_argument("--workers", type=int, default=None, help="default: 2, or one per host")
    parser.add_argument("--cores", type=int, default=1)
    parser.add_argument("--memory", default="1g")
    parser.add_argument(
        "--worker-hosts",
        default="",
        help="comma-separated loopback addresses, one per worker (default: the master's host)",
    )
    args = parser.parse_args(argv)
    worker_hosts = tuple(h.strip() for h in args.worker_hosts.split(",") if h.strip())
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    cluster = StandaloneCluster(
        ClusterConfig(
            folder=args.dir.resolve(),
            port=args.port,
            webui_port=args.webui_port,
            workers=args.workers or len(worker_hosts) or 2,
            cores=args.cores,
            memory=args.memory,
            worker_hosts=worker_hosts,
        )
    )
    if args.command == "start":
        cluster.start()
        hosts = ",".join(sorted(set(cluster.alive_worker_hosts())))
        print(
            f"master {cluster.config.master_url}, {cluster.config.workers} workers x "
            f"{args.cores} core on {hosts}"
        )
    elif args.command == "stop":
        cluster.stop()
        print("cluster stopped")
    elif args.command == "check":
        url = args.master or cluster.config.master_url
        if not master_reachable(url):
            print(f"no Spark master answers at {url}; start one: scripts/cluster.sh start")
            return 2
        print(f"master {url} answers")
    else:
        if cluster.master_state() is None:
            print(f"no master running at {cluster.config.master_url} (scripts/cluster.sh start)")
            return 1
        hosts = cluster.alive_worker_hosts()
        where = f" on {','.join(sorted(set(hosts)))}" if hosts else ""
        print(f"master {cluster.config.master_url}: {len(hosts)} workers alive{where}")
        return 0 if hosts else 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
