"""The network-namespace hosts and their faults do what the partition profile relies on:

- a host reaches a server on the bridge address; a cut (link down) and each one-way drop
  stop that, a heal or undrop restores it, and the other hosts are never affected;
- leftovers of a crashed run (a namespace, a link) are removed by the next setup, and
  teardown leaves nothing behind;
- the latency relay adds about 50 ms per round trip while delaying, nothing otherwise.

Needs root, `ip` and `nft`: a failure under CI (which has them), skipped elsewhere.
"""

from __future__ import annotations

import contextlib
import os
import socket
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Iterator

import pytest

from tests.chaos import netlab
from tests.chaos.latency import LatencyRelay
from tests.chaos.netlab import DB_ADDRESS, NetLab


@pytest.fixture(scope="module")
def lab() -> Iterator[NetLab]:
    reason = netlab.unavailable_reason()
    if reason:
        if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
            pytest.fail(f"network-namespace hosts unavailable under CI: {reason}")
        pytest.skip(reason)
    # A crashed run's leftovers: the next setup removes them. Planted under the lab lock,
    # so a parallel test process's lab is never mistaken for them.
    lock = netlab.take_lock()
    subprocess.run(["ip", "netns", "add", f"{netlab.PREFIX}-h9"], check=True)
    made = NetLab(2).setup(lock)
    assert f"{netlab.PREFIX}-h9" in made.leftovers
    yield made
    assert made.teardown() == []


@pytest.fixture(scope="module")
def echo(lab: NetLab) -> Iterator[int]:
    """An echo server on the bridge address (where the chaos PostgreSQL listens)."""
    server = socket.create_server((DB_ADDRESS, 0))
    port = int(server.getsockname()[1])

    def serve() -> None:
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            threading.Thread(target=_echo, args=(conn,), daemon=True).start()

    threading.Thread(target=serve, daemon=True).start()
    yield port
    server.close()


def _echo(conn: socket.socket) -> None:
    # The test tears the lab down under open connections: a dead link ends the echo
    # quietly instead of surfacing later as another test's unhandled thread exception.
    with conn, contextlib.suppress(OSError):
        while data := conn.recv(4096):
            conn.sendall(data)


PROBE = (
    "import socket, sys\n"
    "try:\n"
    "    address, wait = (sys.argv[1], int(sys.argv[2])), float(sys.argv[3])\n"
    "    s = socket.create_connection(address, timeout=wait)\n"
    "    s.sendall(b'ping'); ok = s.recv(4) == b'ping'\n"
    "except OSError:\n"
    "    ok = False\n"
    "print('up' if ok else 'down')\n"
)


def reach(lab: NetLab, host: int, port: int, timeout: float = 1.0) -> str:
    """'up' when a process on `host` can talk to the echo server within `timeout`
    seconds per step (connect, answer), else 'down'."""
    done = subprocess.run(
        lab.command(host, [sys.executable, "-c", PROBE, DB_ADDRESS, str(port), str(timeout)]),
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )
    return done.stdout.strip()


@pytest.mark.slow
def test_cut_and_one_way_drops_isolate_one_host_until_healed(lab: NetLab, echo: int) -> None:
    assert [reach(lab, 0, echo), reach(lab, 1, echo)] == ["up", "up"]
    lab.cut(0)
    assert [reach(lab, 0, echo), reach(lab, 1, echo)] == ["down", "up"]
    lab.heal(0)
    assert reach(lab, 0, echo) == "up"
    for direction in ("in", "out"):
        lab.drop(0, direction)
        assert [reach(lab, 0, echo), reach(lab, 1, echo)] == ["down", "up"], direction
        lab.undrop(0)
        assert reach(lab, 0, echo) == "up", direction
    with pytest.raises(ValueError, match="direction must be 'in' or 'out'"):
        lab.drop(0, "both")


def test_degraded_host_still_connects(lab: NetLab, echo: int) -> None:
    lab.degrade(1)
    try:
        # 1 % loss: TCP retransmits what it loses — a lost SYN or SYN-ACK after 1 s, a
        # second loss after 3 s more — so the probe gives it that long.
        assert reach(lab, 1, echo, timeout=5.0) == "up"
    finally:
        lab.restore(1)


@pytest.mark.latency
def test_relay_adds_about_50_ms_per_round_trip_only_while_delaying(echo: int) -> None:
    relay = LatencyRelay(DB_ADDRESS, (DB_ADDRESS, echo), seed=1).start()
    try:
        with socket.create_connection(relay.address, timeout=5) as conn:
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            plain = _round_trips(conn, 10)
            relay.delaying.set()
            delayed = _round_trips(conn, 20)
            relay.delaying.clear()
            after = _round_trips(conn, 10)
    finally:
        relay.stop()
    assert statistics.median(plain) < 0.02
    assert 0.035 < statistics.median(delayed) < 0.09
    assert max(delayed) <= 0.2
    assert statistics.median(after) < 0.02


def _round_trips(conn: socket.socket, count: int) -> list[float]:
    times = []
    for _ in range(count):
        started = time.perf_counter()
        conn.sendall(b"x")
        assert conn.recv(1) == b"x"
        times.append(time.perf_counter() - started)
    return times
