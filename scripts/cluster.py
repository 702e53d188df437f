#!/usr/bin/env python3
"""A Spark standalone cluster on this machine: one master and N workers, from the pyspark install.

``start`` (returns once every worker is ALIVE), ``status``, ``stop`` (also removes the workers'
application folders), ``check --master URL`` (exit 0 if it answers); each JVM in its own
process group, pid and log files under ``--dir``. ``--worker-hosts`` puts each worker on a
loopback address (README, "What does a crash do to my output?"); ``--isolated --hosts N`` each
on a host of its own (``start-host`` relaunches a lost one, ``clean`` removes what a killed run
left): docs/design.md, "Isolated hosts".
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import shlex
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING

import pyspark

if TYPE_CHECKING:
    from connectors.kafka.local_broker import LocalKafkaBroker
    from connectors.s3.local_store import LocalS3Store

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from connectors.processes import alive, port_open, read_pid, spawn  # noqa: E402
from spark_ext.recovery import network  # noqa: E402

log = logging.getLogger("cluster")
HOST = "127.0.0.1"
#: Where the isolated cluster keeps its settings (beside ``cluster.json``'s pids).
ISOLATED = "isolated.json"


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
        self.host = HOST  # the master's
        self.master_url = f"spark://{HOST}:{args.port}"
        self.state_file = self.folder / "cluster.json"

    def _launch(self, name: str, args: list[str], host: str, prefix: tuple[str, ...] = ()) -> int:
        """Start ``spark-class args`` on ``host`` (wrapped in ``prefix``); the launcher's pid."""
        logs = self.folder / "logs"
        logs.mkdir(parents=True, exist_ok=True)
        python = ROOT / ".venv" / "bin" / "python"
        spark_home = Path(pyspark.__file__).resolve().parent  # bin/spark-class, the Spark jars
        env = dict(
            os.environ,
            SPARK_HOME=str(spark_home),
            SPARK_LOCAL_IP=host,
            PYSPARK_PYTHON=str(python) if python.exists() else sys.executable,
            SPARK_LOG_DIR=str(logs),
            SPARK_DAEMON_MEMORY="512m",
            PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
        )
        with open(logs / f"{name}.log", "ab") as out:
            proc = subprocess.Popen(
                [*prefix, str(spark_home / "bin" / "spark-class"), *args],
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
        url = f"http://{self.host}:{self.args.webui_port}/json/"
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
        master = ["org.apache.spark.deploy.master.Master", "--host", self.host]
        master += ["--port", str(a.port), "--webui-port", str(a.webui_port)]
        pids = {"master": self._launch("master", master, self.host)}
        for i in range(self.workers):
            pids[f"worker-{i}"] = self.launch_worker(i)
        self.state_file.write_text(json.dumps(pids))
        try:
            self.wait_alive(pids, self.hosts, timeout_s)
        except SystemExit:
            self.stop()
            raise
        log.info("cluster up: %s with %d workers", self.master_url, self.workers)

    def launch_worker(self, index: int) -> int:
        """Start worker ``index`` on its host; returns the launcher's pid."""
        a, host = self.args, self.hosts[index]
        work = self.folder / f"worker-{index}"
        work.mkdir(parents=True, exist_ok=True)
        worker = ["org.apache.spark.deploy.worker.Worker", "--host", host]
        worker += ["--cores", str(a.cores), "--memory", a.memory, "--work-dir", str(work)]
        worker += ["--webui-port", "0", self.master_url]
        return self._launch(f"worker-{index}", worker, host, self.worker_prefix(index))

    def worker_prefix(self, index: int) -> tuple[str, ...]:
        """What worker ``index``'s launch is wrapped in (nothing: it runs on this host)."""
        return ()

    def wait_alive(self, pids: dict[str, int], hosts: list[str], timeout_s: float) -> None:
        """Return once the master lists an ALIVE worker on each of ``hosts`` (a host named twice:
        two); ``SystemExit`` once a process of ``pids`` exits or time runs out."""
        deadline = time.monotonic() + timeout_s
        while Counter(hosts) - Counter(self.alive_worker_hosts() or []):
            dead = [n for n, p in pids.items() if not alive(p)]
            if dead:
                raise SystemExit(f"{dead} exited; see {self.folder / 'logs'}")
            if time.monotonic() > deadline:
                raise SystemExit(
                    f"workers not ALIVE after {timeout_s}s; see {self.folder / 'logs'}"
                )
            time.sleep(1)

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


class IsolatedCluster(StandaloneCluster):
    """The cluster with each worker on an isolated host (:mod:`spark_ext.recovery.network`):
    the master and the driver on the bridge's first address, a broker (and a store) of the
    cluster's own on its second; docs/design.md, "Isolated hosts"."""

    def __init__(self, args: argparse.Namespace) -> None:
        if args.worker_hosts:
            raise SystemExit("--isolated gives each worker its own host: drop --worker-hosts")
        args.workers = args.hosts or args.workers or 2
        super().__init__(args)
        self.hosts = [network.host_address(i) for i in range(self.workers)]
        self.host = network.DRIVER_ADDRESS
        self.master_url = f"spark://{self.host}:{args.port}"
        self.settings_file = self.folder / ISOLATED
        self.hide = [Path(h).resolve() for h in args.hide or [ROOT / "var"]]
        #: The one folder every host and the driver see: the harness's fault logs, never data.
        self.shared = self.folder / "shared"

    def _record_owner(self, pid: int) -> None:
        """Write on the bridge who owns the cluster and where its records are (:func:`_owner`)."""
        network.ip("link", "set", network.BRIDGE, "alias", f"owner={pid} dir={self.folder}")

    def worker_prefix(self, index: int) -> tuple[str, ...]:
        """Into the host's network namespace, with mounts of its own: a private ``/tmp``, a tmpfs
        over each hidden folder, and only its work folder and ``shared/`` from the machine."""
        self.shared.mkdir(parents=True, exist_ok=True)
        q = shlex.quote
        keep = [self.folder / f"worker-{index}", self.shared]
        lines = ["mount -t tmpfs sxh-stage /mnt"]  # the kept folders wait here meanwhile
        lines += [
            f"mkdir /mnt/{j} && mount --bind {q(str(k))} /mnt/{j}" for j, k in enumerate(keep)
        ]
        lines += ["mount -t tmpfs sxh-tmp /tmp"]
        lines += [
            f"mkdir -p {q(str(h))} && mount -t tmpfs sxh-hidden {q(str(h))}" for h in self.hide
        ]
        lines += [
            f"mkdir -p {q(str(k))} && mount --move /mnt/{j} {q(str(k))}" for j, k in enumerate(keep)
        ]
        mounts = "\n".join([*lines, "umount /mnt", 'exec "$@"'])
        name = network.host_name(index)
        prefix = ("ip", "netns", "exec", name, "unshare", "--mount", "--propagation", "private")
        return (*prefix, "sh", "-ec", mounts, "sh")

    def _services(self) -> tuple[LocalKafkaBroker, LocalS3Store]:
        """The cluster's broker and store on the bridge (the store runs only with ``--store``)."""
        from connectors.kafka.local_broker import BrokerConfig, LocalKafkaBroker
        from connectors.s3.local_store import LocalS3Store, StoreConfig

        host = network.SERVICE_ADDRESS
        broker = LocalKafkaBroker(BrokerConfig(data_dir=self.folder / "broker", host=host))
        store = LocalS3Store(StoreConfig(data_dir=self.folder / "s3", host=host))
        return broker, store

    def profile(self, store: bool) -> str:
        """``conf/cluster.toml`` pointed at this cluster (master, driver address, broker, store)."""
        text = (ROOT / "conf" / "cluster.toml").read_text()
        text = text.replace("spark://127.0.0.1:7077", self.master_url)
        text = text.replace("127.0.0.1:9092", f"{network.SERVICE_ADDRESS}:9092")
        cores = self.workers * self.args.cores
        text = text.replace('"spark.cores.max" = 2', f'"spark.cores.max" = {cores}')
        driver = network.DRIVER_ADDRESS
        text = text.replace(
            "[spark.conf]\n",
            f'[spark.conf]\n"spark.driver.host" = "{driver}"\n'
            f'"spark.driver.bindAddress" = "{driver}"\n',
        )
        text = text.replace('data_root = "var/cluster-data"', f'data_root = "{self.folder}/data"')
        if store:
            s3 = (ROOT / "conf" / "s3.toml").read_text()
            storage = s3[s3.index("\n[storage]\n") + 1 :].split("\n[", 1)[0]  # the section
            text += "\n" + storage.replace("127.0.0.1:9000", f"{network.SERVICE_ADDRESS}:9000")
        return text

    def start(self, timeout_s: float = 180.0) -> None:
        a = self.args
        self.make_hosts()
        try:
            broker, store = self._services()
            broker.start()
            if a.store:
                store.start()
            super().start(timeout_s)
        except BaseException:
            self.stop()
            raise
        self._record_owner(a.owner_pid or self.pids()["master"])
        (self.folder / "isolated.toml").write_text(self.profile(a.store))
        if a.owner_pid:
            self.start_watchdog()

    def make_hosts(self) -> None:
        """Refuse a range in use or a cluster whose owner lives, remove what a dead one left
        (:func:`clean_leftovers`), record the settings, make the bridge and the hosts."""
        ip, bridge = network.ip, network.BRIDGE
        used = [
            line.split()[1]
            for line in ip("-o", "-4", "addr", "show").splitlines()
            if f" {network.SUBNET}." in line and line.split()[1] != bridge
        ]
        if used:
            raise SystemExit(f"{network.SUBNET}.0/24 is in use on {used}: isolated hosts need it")
        clean_leftovers()
        self.folder.mkdir(parents=True, exist_ok=True)
        settings = vars(self.args) | {"dir": str(self.folder), "hide": [str(h) for h in self.hide]}
        self.settings_file.write_text(json.dumps(settings))
        ip("link", "add", bridge, "type", "bridge")
        for address in (network.DRIVER_ADDRESS, network.SERVICE_ADDRESS):
            ip("addr", "add", f"{address}/24", "dev", bridge)
        ip("link", "set", bridge, "up")
        self._record_owner(self.args.owner_pid or os.getpid())
        for i, name in enumerate(map(network.host_name, range(self.workers))):
            network.add_host(name, self.hosts[i])

    def start_watchdog(self) -> None:
        """Start the process that stops the cluster once its owner is gone (:func:`watch`)."""
        watch = [sys.executable, str(Path(__file__).resolve()), "watch", "--dir", str(self.folder)]
        logs = self.folder / "logs"
        logs.mkdir(parents=True, exist_ok=True)
        spawn(watch, os.environ, logs / "watchdog.log", logs / "watchdog.pid")

    def stop(self, timeout_s: float = 30.0) -> None:
        """Stop the workers, the master and the services, then remove the hosts and the bridge."""
        watchdog = read_pid(self.folder / "logs" / "watchdog.pid", f"watch\0--dir\0{self.folder}")
        if watchdog is not None and watchdog != os.getpid():
            os.kill(watchdog, signal.SIGKILL)
        super().stop(timeout_s)
        broker, store = self._services()
        broker.stop(hard=True)
        store.stop()
        removed = network.remove_hosts()
        if removed:
            log.info("removed %s", ", ".join(removed))
        self.settings_file.unlink(missing_ok=True)

    def start_host(self, index: int, timeout_s: float = 120.0) -> None:
        """Relaunch worker ``index`` in its host (after a host loss) and wait until ALIVE."""
        network.kill_host(network.host_name(index))
        pids = self.pids()
        pids[f"worker-{index}"] = self.launch_worker(index)
        self.state_file.write_text(json.dumps(pids))
        self.wait_alive(
            {f"worker-{index}": pids[f"worker-{index}"]}, [self.hosts[index]], timeout_s
        )


def _owner() -> tuple[int, str] | None:
    """The owner pid and folder the bridge records (``None``: no bridge or no record)."""
    shown = network.ip("-o", "link", "show", network.BRIDGE, check=False)
    fields = dict(f.split("=", 1) for f in shown.partition(" alias ")[2].split() if "=" in f)
    if "owner" not in fields:
        return None
    return int(fields["owner"]), fields.get("dir", "")


def clean_leftovers() -> list[str]:
    """Stop whatever an isolated cluster whose owner is gone left: its processes (by its
    folder's records), its hosts and its bridge. A live owner's cluster is left alone."""
    owner = _owner()
    if owner is not None and alive(owner[0]):
        raise SystemExit(f"the isolated cluster of pid {owner[0]} ({owner[1]}) still runs")
    left: list[str] = []
    if owner is not None and (Path(owner[1]) / ISOLATED).exists():
        isolated_from(Path(owner[1])).stop(timeout_s=5.0)
        left.append(owner[1])
    return left + network.remove_hosts()


def isolated_from(folder: Path) -> IsolatedCluster:
    """The isolated cluster whose settings (its start's arguments) ``folder`` holds."""
    settings = json.loads((folder / ISOLATED).read_text())
    return IsolatedCluster(argparse.Namespace(**settings | {"dir": folder}))


def watch(folder: Path) -> None:
    """Stop the isolated cluster of ``folder`` once its owner process is gone."""
    owner = json.loads((folder / ISOLATED).read_text())["owner_pid"]
    while alive(owner) and (folder / ISOLATED).exists():
        time.sleep(0.5)
    if (folder / ISOLATED).exists():
        log.info("owner %d gone: stopping the isolated cluster of %s", owner, folder)
        isolated_from(folder).stop(timeout_s=5.0)


def _signal_group(pid: int, sig: signal.Signals) -> None:
    try:
        os.killpg(pid, sig)  # the launcher's whole group: bash spark-class and its JVM
    except ProcessLookupError:
        pass


def parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "command", choices=["start", "stop", "status", "check", "start-host", "clean", "watch"]
    )
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
        help="comma-separated loopback addresses, one per worker (default: the master's host; "
        "they need 127.0.0.0/8 on lo, on macOS: ifconfig lo0 alias 127.0.0.2)",
    )
    parser.add_argument("--isolated", action="store_true", help="each worker on a host of its own")
    parser.add_argument("--hosts", type=int, default=None, help="--isolated: how many hosts")
    parser.add_argument("--host", type=int, default=None, help="start-host: which host")
    parser.add_argument(
        "--hide",
        action="append",
        help="--isolated: a folder the hosts see empty (repeatable; default: the repo's var/)",
    )
    parser.add_argument("--store", action="store_true", help="--isolated: an S3 store too")
    parser.add_argument(
        "--owner-pid", type=int, default=None, help="--isolated: stop everything once it is gone"
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    logging.getLogger("kafka").setLevel(logging.WARNING)
    folder = args.dir.resolve()
    if args.command == "clean":
        removed = clean_leftovers()
        print(f"removed {', '.join(removed)}" if removed else "nothing left to remove")
        return 0
    if args.command == "watch":
        watch(folder)
        return 0
    cluster: StandaloneCluster
    if args.command != "start" and (folder / ISOLATED).exists():
        cluster = isolated_from(folder)  # the settings it was started with
    else:
        cluster = IsolatedCluster(args) if args.isolated else StandaloneCluster(args)
    if args.command == "start-host":
        if not isinstance(cluster, IsolatedCluster):
            raise SystemExit(f"no isolated cluster in {folder}")
        cluster.start_host(args.host or 0)
        return 0
    if args.command == "start":
        cluster.start()
        hosts = ",".join(sorted(set(cluster.alive_worker_hosts() or [])))
        print(
            f"master {cluster.master_url}, {cluster.workers} workers x {args.cores} core on {hosts}"
        )
        if args.isolated:
            print(f"profile {cluster.folder / 'isolated.toml'}")
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
