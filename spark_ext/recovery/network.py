"""Hosts on one machine (network namespaces on a bridge, names from :data:`PREFIX`, addresses in
:data:`SUBNET`) and the faults only a network brings (docs/design.md, "Isolated hosts").

>>> host_name(1), host_address(1)
('sxh-w1', '10.231.0.11')
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import subprocess
import time

from spark_ext.recovery.errors import RecoveryError

__all__ = [
    "BRIDGE",
    "DRIVER_ADDRESS",
    "DRIVER_HOST",
    "DRIVER_HOST_ADDRESS",
    "PREFIX",
    "SERVICE_ADDRESS",
    "SUBNET",
    "NetworkError",
    "add_host",
    "cut",
    "heal",
    "host_address",
    "host_name",
    "host_of",
    "host_pids",
    "hosts",
    "in_host",
    "ip",
    "kill_host",
    "remove_host",
    "remove_hosts",
]

log = logging.getLogger(__name__)

#: The start of every namespace, interface and tmpfs name; the bridge joining the hosts.
PREFIX = "sxh"
BRIDGE = f"{PREFIX}-br0"
#: The hosts' /24; the bridge's addresses of the master and driver, and of broker and store.
SUBNET = "10.231.0"
DRIVER_ADDRESS = f"{SUBNET}.1"
SERVICE_ADDRESS = f"{SUBNET}.2"
#: The host a faulted job's driver runs on, to be cut from the services (``driver-partition``).
DRIVER_HOST = f"{PREFIX}-d"
DRIVER_HOST_ADDRESS = f"{SUBNET}.3"
#: A MAC address no interface has: packets sent to it are dropped, never refused.
VOID_MAC = "02:00:00:00:0e:0e"


class NetworkError(RecoveryError):
    """An ``ip`` command on the isolated hosts failed (not root, no ``ip``, a name taken)."""


def host_name(index: int) -> str:
    """The network namespace (and veth) of worker host ``index``."""
    return f"{PREFIX}-w{index}"


def host_address(index: int) -> str:
    """The address of worker host ``index`` on the bridge."""
    return f"{SUBNET}.{10 + index}"


def ip(*args: str, check: bool = True) -> str:
    """Run ``ip args`` and return its output; :class:`NetworkError` if it fails (``check``)."""
    try:
        done = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30)
    except FileNotFoundError:
        raise NetworkError("no `ip` command: install iproute2 (isolated hosts need it)") from None
    if check and done.returncode != 0:
        raise NetworkError(f"ip {' '.join(args)}: {done.stderr.strip() or done.stdout.strip()}")
    return done.stdout


def hosts() -> list[str]:
    """The network namespaces carrying :data:`PREFIX` (a running or a leftover cluster's)."""
    names = (line.split()[0] for line in ip("netns", "list").splitlines() if line.strip())
    return sorted(n for n in names if n.startswith(f"{PREFIX}-"))


def host_pids(host: str) -> list[int]:
    """Every process in ``host``'s network namespace (a host's processes, all of them)."""
    out = ip("netns", "pids", host, check=False)
    return [int(p) for p in out.split() if p.isdigit()]


def host_of(pid: int) -> str | None:
    """The isolated host ``pid`` runs on (``None``: the machine's own namespace, or gone)."""
    name = ip("netns", "identify", str(pid), check=False).strip()
    return name if name.startswith(f"{PREFIX}-") else None


def kill_host(host: str, timeout_s: float = 10.0) -> int:
    """SIGKILL every process of ``host`` until none is left; returns how many were killed."""
    killed: set[int] = set()
    deadline = time.monotonic() + timeout_s
    while pids := host_pids(host):
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
                killed.add(pid)
        if time.monotonic() > deadline:
            raise NetworkError(f"{host}: processes {pids} still alive after SIGKILL")
        time.sleep(0.1)
    log.info("%s: %d processes killed", host, len(killed))
    return len(killed)


def cut(host: str, address: str = SERVICE_ADDRESS) -> None:
    """Drop every packet ``host`` sends to ``address`` (its neighbour entry points nowhere):
    connections hang as behind a broken link, none is refused."""
    entry = (address, "lladdr", VOID_MAC, "dev", "eth0", "nud", "permanent")
    ip("-n", host, "neigh", "replace", *entry)
    log.info("%s cut from %s", host, address)


def heal(host: str, address: str = SERVICE_ADDRESS) -> None:
    """Undo :func:`cut`: ``host`` resolves ``address`` again."""
    ip("-n", host, "neigh", "del", address, "dev", "eth0", check=False)
    log.info("%s healed (reaches %s again)", host, address)


def add_host(name: str, address: str) -> None:
    """Make the host ``name``: a network namespace whose ``eth0`` (the other end: veth ``name``
    in :data:`BRIDGE`, which must exist) holds ``address``/24, and its ``lo`` up."""
    ip("netns", "add", name)
    ip("link", "add", name, "type", "veth", "peer", "name", "eth0", "netns", name)
    ip("link", "set", name, "master", BRIDGE, "up")
    ip("-n", name, "addr", "add", f"{address}/24", "dev", "eth0")
    ip("-n", name, "link", "set", "eth0", "up")
    ip("-n", name, "link", "set", "lo", "up")


def remove_host(name: str) -> None:
    """Kill every process of the host ``name`` and delete it (its veth goes with it)."""
    kill_host(name)
    ip("netns", "delete", name, check=False)


def in_host(host: str, argv: list[str]) -> list[str]:
    """The command running ``argv`` on ``host`` (the same process: ``ip netns exec`` execs)."""
    return ["ip", "netns", "exec", host, *argv]


def remove_hosts() -> list[str]:
    """Kill every process of every :data:`PREFIX` host, delete the namespaces and the bridge
    (what a killed run left, or a cluster being stopped); returns what was removed."""
    removed = []
    for host in hosts():
        remove_host(host)
        removed.append(host)
    if ip("link", "show", BRIDGE, check=False):
        ip("link", "delete", BRIDGE, check=False)  # its veths went with their namespaces
        removed.append(BRIDGE)
    return removed
