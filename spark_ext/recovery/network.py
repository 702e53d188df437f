"""Hosts on one machine (network namespaces on a bridge, names from :data:`PREFIX`, addresses in
:data:`SUBNET`) and the faults only a network brings (docs/design.md, "Isolated hosts").

>>> host_name(1), host_address(1)
('sxh-w1', '10.231.0.11')
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import signal
import subprocess
import time
from dataclasses import dataclass

from spark_ext.recovery.errors import RecoveryError

__all__ = [
    "BRIDGE",
    "DRIVER_ADDRESS",
    "DRIVER_HOST",
    "DRIVER_HOST_ADDRESS",
    "PREFIX",
    "SERVICE_ADDRESS",
    "SLOW",
    "SUBNET",
    "LinkShape",
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
    "shaped",
    "slow",
    "tc",
    "unslow",
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
    """An ``ip`` or ``tc`` command on the isolated hosts failed (not root, no ``ip``, a name
    taken, a queueing discipline the kernel lacks)."""


@dataclass(frozen=True)
class LinkShape:
    """How :func:`slow` shapes each direction of a host's link: ``rate_kbit`` kbit/s, a queue
    holding at most ``latency_ms`` of it (the queueing delay under load; beyond it, tail
    drops), ``loss``: the share of packets dropped at random."""

    rate_kbit: int = 1000
    latency_ms: int = 200
    loss: float = 0.02
    burst_bytes: int = 3000

    def __post_init__(self) -> None:
        if self.rate_kbit <= 0 or self.latency_ms <= 0 or self.burst_bytes <= 0:
            raise ValueError(f"{self}: rate, latency and burst must be > 0")
        if not 0.0 <= self.loss <= 1.0:
            raise ValueError(f"{self}: loss is a share, 0 to 1")


#: The ``slow-link`` fault's shape (docs/design.md, "Isolated hosts").
SLOW = LinkShape()


def host_name(index: int) -> str:
    """The network namespace (and veth) of worker host ``index``."""
    return f"{PREFIX}-w{index}"


def host_address(index: int) -> str:
    """The address of worker host ``index`` on the bridge."""
    return f"{SUBNET}.{10 + index}"


def _iproute2(command: str, args: tuple[str, ...], check: bool, needed_by: str) -> str:
    """Run ``command args`` (an iproute2 tool) and return its output; :class:`NetworkError` if
    it fails (``check``)."""
    try:
        done = subprocess.run([command, *args], capture_output=True, text=True, timeout=30)
    except FileNotFoundError:
        raise NetworkError(f"no `{command}` command: install iproute2 ({needed_by})") from None
    if check and done.returncode != 0:
        error = done.stderr.strip() or done.stdout.strip()
        raise NetworkError(f"{command} {' '.join(args)}: {error}")
    return done.stdout


def ip(*args: str, check: bool = True) -> str:
    """Run ``ip args`` and return its output; :class:`NetworkError` if it fails (``check``)."""
    return _iproute2("ip", args, check, "isolated hosts need it")


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


def tc(*args: str, check: bool = True) -> str:
    """Run ``tc args`` and return its output; :class:`NetworkError` if it fails (``check``)."""
    return _iproute2("tc", args, check, "slow-link needs it")


def _ends(host: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """``tc`` arguments naming the two ends of ``host``'s veth: the bridge's (traffic to the
    host leaves there) and the host's ``eth0`` (traffic from it)."""
    return ("dev", host), ("-n", host, "dev", "eth0")


def _random_share(loss: float) -> str:
    """A classic BPF program (``tc ... bpf bytecode``) matching a ``loss`` share of packets:
    ``ld rand; jge #threshold; ret 0 (no match); ret -1 (match)``."""
    ancillary_random = 2**32 - 0x1000 + 56  # SKF_AD_OFF + SKF_AD_RANDOM
    threshold = min(math.floor(loss * 2**32), 2**32 - 1)
    return f"4,32 0 0 {ancillary_random},53 0 1 {threshold},6 0 0 0,6 0 0 {2**32 - 1}"


def slow(host: str, shape: LinkShape = SLOW) -> None:
    """Shape both directions of ``host``'s link (until :func:`unslow`, or the host is removed):
    a token bucket at ``shape.rate_kbit`` with a queue of ``shape.latency_ms``, and a random
    ``shape.loss`` share of packets dropped (docs/design.md, "Isolated hosts")."""
    bucket = f"rate {shape.rate_kbit}kbit burst {shape.burst_bytes} latency {shape.latency_ms}ms"
    _unshape(host)  # another shape before: replaced
    for end in _ends(host):
        # The root only sorts: class 1:1 (unlimited) holds the token bucket, class 1:2 a
        # queue of no packet, where the filter sends the dropped share.
        for change in (
            "qdisc add {dev} root handle 1: htb default 1",
            "class add {dev} parent 1: classid 1:1 htb rate 10gbit quantum 60000",
            "class add {dev} parent 1: classid 1:2 htb rate 10gbit quantum 60000",
            f"qdisc add {{dev}} parent 1:1 handle 10: tbf {bucket}",
            "qdisc add {dev} parent 1:2 handle 20: pfifo limit 0",
        ):
            tc(*end[:-2], *change.format(dev=f"dev {end[-1]}").split())
        if shape.loss:
            program = ("bpf", "bytecode", _random_share(shape.loss), "flowid", "1:2")
            tc(*end[:-2], "filter", "add", *end[-2:], "parent", "1:", "prio", "1", *program)
    log.info("%s: link slowed (%s)", host, shape)


def _unshape(host: str) -> None:
    for end in _ends(host):
        tc(*end[:-2], "qdisc", "del", *end[-2:], "root", check=False)


def unslow(host: str) -> None:
    """Undo :func:`slow` (nothing to undo, or the host gone: nothing happens)."""
    _unshape(host)
    log.info("%s: link no longer slowed", host)


def shaped(host: str) -> bool:
    """Whether :func:`slow` shapes ``host``'s link (either end)."""
    return any(" tbf " in tc(*e[:-2], "qdisc", "show", *e[-2:], check=False) for e in _ends(host))


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
