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
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from connectors.processes import alive, port_open  # noqa: E402

log = logging.getLogger("cluster")
HOST = "127.0.0.1"


def spark_home() -> Path:
    """The pyspark package folder: it holds ``bin/spark-class`` and the Spark jars."""
    import pyspark

    return Path(pyspark.__file__).resolve().parent


class StandaloneCluster:
    """Start, wait for and stop a master and its workers by their pids, as the command line
    ``args`` says (folder, ports, workers and their hosts, cores, memory)."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.folder: Path = args.dir.resolve()
        self.hosts = [h.strip() for h in args.worker_hosts.split(",") if h.strip()]
        self.workers: int = args.workers or len(self.hosts) or 2
        if self.hosts and len(self.hosts) != self.workers:
            raise SystemExit(
                f"{self.workers} workers but {len(self.hosts)} worker hosts "
                f"({','.join(self.hosts)}): give one host per worker"
            )
        self.hosts = self.hosts or [HOST] * self.workers
        self.master_url = f"spark://{HOST}:{args.port}"
        self.state_file = self.folder / "cluster.json"

    def _launch(self, name: str, args: list[str], host: str) -> int:
        logs = self.folder / "logs"
        logs.mkdir(parents=True, exist_ok=True)
        python = ROOT / ".venv" / "bin" / "python"
        env = dict(
            os.environ,
            SPARK_HOME=str(spark_home()),
            SPARK_LOCAL_IP=host,
            PYSPARK_PYTHON=str(python) if python.exists() else sys.executable,
            SPARK_LOG_DIR=str(logs),
            SPARK_DAEMON_MEMORY="512m",
            PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
        )
        with open(logs / f"{name}.log", "ab") as out:
            proc = subprocess.Popen(
                [str(spark_home() / "bin" / "spark-class"), *args],
                cwd=self.folder,
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        log.info("%s: pid %d", name, proc.pid)
        return proc.pid

    def pids(self) -> dict[str, int]:
        try:
            return {k: int(v) for k, v in json.loads(self.state_file.read_text()).items()}
        except FileNotFoundError:
            return {}

    def alive_worker_hosts(self) -> list[str] | None:
        """The host of each worker the master lists as ALIVE; ``None`` when no master answers."""
        url = f"http://{HOST}:{self.args.webui_port}/json/"
        try:
            with urllib.request.urlopen(url, timeout=5) as resp:
                workers = json.load(resp).get("workers", [])
        except OSError:
            return None
        return [str(w.get("host")) for w in workers if w.get("state") == "ALIVE"]

    def start(self, timeout_s: float = 180.0) -> None:
        a = self.args
        if any(alive(p) for p in self.pids().values()):
            raise SystemExit(f"a cluster is already running from {self.folder}; stop it first")
        self.folder.mkdir(parents=True, exist_ok=True)
        master = ["org.apache.spark.deploy.master.Master", "--host", HOST, "--port", str(a.port)]
        pids = {
            "master": self._launch("master", [*master, "--webui-port", str(a.webui_port)], HOST)
        }
        for i, host in enumerate(self.hosts):
            work = self.folder / f"worker-{i}"
            work.mkdir(exist_ok=True)
            pids[f"worker-{i}"] = self._launch(
                f"worker-{i}",
                [
                    "org.apache.spark.deploy.worker.Worker",
                    *("--host", host, "--cores", str(a.cores), "--memory", a.memory),
                    *("--work-dir", str(work), "--webui-port", "0", self.master_url),
                ],
                host,
            )
        self.state_file.write_text(json.dumps(pids))
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if len(self.alive_worker_hosts() or []) == self.workers:
                log.info("cluster up: %s with %d workers", self.master_url, self.workers)
                return
            dead = [n for n, p in pids.items() if not alive(p)]
            if dead:
                self.stop()
                raise SystemExit(f"{dead} exited; see {self.folder / 'logs'}")
            time.sleep(1)
        self.stop()
        raise SystemExit(f"workers not ALIVE after {timeout_s}s; see {self.folder / 'logs'}")

    def stop(self, timeout_s: float = 30.0) -> None:
        """Stop every process (workers first), then remove the workers' application folders."""
        pids = self.pids()
        for name, pid in sorted(pids.items(), reverse=True):
            _signal_group(pid, signal.SIGTERM)
            log.info("stopping %s (pid %d)", name, pid)
        deadline = time.monotonic() + timeout_s
        while any(alive(p) for p in pids.values()) and time.monotonic() < deadline:
            time.sleep(0.5)
        for pid in pids.values():
            _signal_group(pid, signal.SIGKILL)
        self.state_file.unlink(missing_ok=True)
        apps = sorted(self.folder.glob("worker-*/app-*"))  # each holds its application's jars
        for app in apps:
            shutil.rmtree(app, ignore_errors=True)
        if apps:
            log.info("removed %d application folders (their jars) from the work dirs", len(apps))


def _signal_group(pid: int, sig: signal.Signals) -> None:
    try:
        os.killpg(pid, sig)  # the launcher's whole group: bash spark-class and its JVM
    except ProcessLookupError:
        pass


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("command", choices=["start", "stop", "status", "check"])
    parser.add_argument("--master", default=None, help="check: the spark:// URL to try")
    parser.add_argument("--dir", type=Path, default=ROOT / "var" / "cluster")
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
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    cluster = StandaloneCluster(args)
    if args.command == "start":
        cluster.start()
        hosts = ",".join(sorted(set(cluster.alive_worker_hosts() or [])))
        print(
            f"master {cluster.master_url}, {cluster.workers} workers x {args.cores} core on {hosts}"
        )
    elif args.command == "stop":
        cluster.stop()
        print("cluster stopped")
    elif args.command == "check":
        url = args.master or cluster.master_url
        host, _, port = url.removeprefix("spark://").partition(":")
        if not (port or "7077").isdigit() or not port_open(host, int(port or 7077), timeout=3.0):
            print(f"no Spark master answers at {url}; start one: scripts/cluster.sh start")
            return 2
        print(f"master {url} answers")
    else:
        alive = cluster.alive_worker_hosts()
        if alive is None:
            print(f"no master running at {cluster.master_url} (scripts/cluster.sh start)")
            return 1
        where = f" on {','.join(sorted(set(alive)))}" if alive else ""
        print(f"master {cluster.master_url}: {len(alive)} workers alive{where}")
        return 0 if alive else 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
