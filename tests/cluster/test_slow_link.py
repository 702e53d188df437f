"""The ``slow-link`` shaping on an isolated host, without Spark: the rate and the random share
of drops it gives, undone by ``unslow`` and gone with the host (docs/design.md, "Isolated
hosts"). The cells under it: test_isolated_hosts.py (heavy)."""

from __future__ import annotations

import re
import socket
import subprocess
import sys
import time

import pytest

from spark_ext.recovery import network
from spark_ext.recovery.network import LinkShape, shaped, slow, unslow
from tests.cluster.test_leftovers import made_hosts, owner  # noqa: F401 (a fixture)

pytestmark = pytest.mark.integration

PORT = 7070
#: Reads each connection to its end, then answers one byte.
SINK = f"""
import socket
server = socket.create_server(("{network.host_address(0)}", {PORT}))
while True:
    conn, _ = server.accept()
    while conn.recv(1 << 16):
        pass
    conn.sendall(b"k")
    conn.close()
"""


def send(size: int, timeout: float = 10.0) -> float:
    """Seconds to send ``size`` bytes to host 0 and have its answer."""
    began = time.monotonic()
    with socket.create_connection((network.host_address(0), PORT), timeout=timeout) as conn:
        conn.sendall(b"x" * size)
        conn.shutdown(socket.SHUT_WR)
        assert conn.recv(1) == b"k"
    return time.monotonic() - began


def dropped(host: str) -> int:
    """Packets dropped on purpose (the random share) on the way to ``host``."""
    shown = network.tc("-s", "qdisc", "show", "dev", host, "parent", "1:2")
    return int(re.search(r"dropped (\d+)", shown).group(1))  # type: ignore[union-attr]


def test_slow_link_limits_the_rate_drops_its_share_and_goes_with_the_host(tmp_path, owner):  # noqa: F811
    made_hosts(tmp_path, owner.pid)
    host = network.host_name(0)
    command = ["ip", "netns", "exec", host, sys.executable, "-c", SINK]
    subprocess.Popen(command, start_new_session=True)  # killed with its host
    for _ in range(50):
        try:
            fast = send(100_000)
            break
        except OSError:
            time.sleep(0.1)
    assert fast < 0.5

    # 100 kB at 800 kbit/s: 1 s, where the unshaped link took milliseconds.
    slow(host, LinkShape(rate_kbit=800, loss=0.0))
    assert shaped(host)
    assert 0.8 < send(100_000) < 3.0

    # Every packet dropped: not even a connection is made.
    slow(host, LinkShape(loss=1.0))
    with pytest.raises(OSError):
        send(1, timeout=0.5)

    # Half of 400 datagrams dropped at random (6 standard deviations either side).
    slow(host, LinkShape(loss=0.5))
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as udp:
        for _ in range(400):
            udp.sendto(b"d", (network.host_address(0), PORT + 1))
    assert 140 <= dropped(host) <= 260

    unslow(host)
    assert not shaped(host)
    assert send(100_000) < 0.5
    slow(host)  # left on: the clean-up of what a run left removes it with the host
    network.remove_hosts()
    assert network.hosts() == []
    assert not shaped(host)
