"""Worker hosts of a chaos run as Linux network namespaces, and the network faults.

Layout (everything inside this machine, nothing routed anywhere else):

    root namespace: bridge jdchaos-br 10.77.0.1/24  <- the private PostgreSQL, the
        |                                              webhook receiver and SMTP sink
        +-- jdchaos-v<i>  ==veth==  eth0 in namespace jdchaos-h<i>, 10.77.0.<10+i>/24

A worker "on host i" runs as `ip netns exec jdchaos-h<i> jobdesk worker ...`: its only
way to the database is its veth link. The faults:

- `cut(i)` / `heal(i)`: the root-side end of the link goes down / up (both directions
  gone, like a pulled cable; TCP connections survive a short cut and resume);
- `drop(i, "in" | "out")`: an nftables rule inside the namespace drops only what the
  database sends to the host (`in`) or only what the host sends to the database
  (`out`): an asymmetric partition; `undrop(i)` removes it;
- `degrade(i)`: 1 % packet loss each way (nftables `numgen random`), and, where the
  kernel has `sch_netem`, 50 ms ± 20 ms delay with `tc netem` on the database's side.
  Kernels built without netem (`has_netem()` is False) get the delay from
  `tests.chaos.latency.LatencyRelay` instead, which the driver puts on the database path
  of that host.

Names, the subnet and a lock file are fixed: one lab per machine at a time. `setup()`
first removes whatever an earlier crashed run left (namespaces, links) under the lock;
`teardown()` (also registered with `atexit`) removes everything again.
"""

from __future__ import annotations

import atexit
import contextlib
import fcntl
import json
import os
import shutil
import subprocess
import time
from pathlib import Path
from typing import IO

PREFIX = "jdchaos"
BRIDGE = f"{PREFIX}-br"
DB_ADDRESS = "10.77.0.1"
SUBNET = "10.77.0.0/24"
LOCK_FILE = Path("/run/jobdesk-chaos-netlab.lock")
LOCK_WAIT = 180.0
NFT_TABLE = "jdchaos"
TOOLS = ("ip", "tc", "nft")


class NetLabUnavailable(RuntimeError):
    """This machine cannot host network-namespace workers (the reason says why)."""


def host_address(index: int) -> str:
    return f"10.77.0.{10 + index}"


def namespace(index: int) -> str:
    return f"{PREFIX}-h{index}"


def _link(index: int) -> str:
    return f"{PREFIX}-v{index}"


def _run(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(args, capture_output=True, text=True, timeout=30, check=False)
    if check and done.returncode != 0:
        raise RuntimeError(f"{' '.join(args)} failed: {done.stderr.strip() or done.stdout}")
    return done


def unavailable_reason() -> str | None:
    """Why network-namespace hosts cannot run here, or None when they can."""
    if os.geteuid() != 0:
        return "needs root (ip netns, veth links, nftables)"
    missing = [tool for tool in TOOLS if shutil.which(tool) is None]
    if missing:
        return f"missing tools: {', '.join(missing)} (Debian packages iproute2, nftables)"
    probe = f"jdprobe-{os.getpid()}"  # not PREFIX: another run's cleanup leaves it alone
    _run("ip", "netns", "del", probe, check=False)
    made = _run("ip", "netns", "add", probe, check=False)
    if made.returncode != 0:
        return f"cannot create a network namespace: {made.stderr.strip()}"
    try:
        nft = _run("ip", "netns", "exec", probe, "nft", "add", "table", "inet", "t", check=False)
        if nft.returncode != 0:
            return f"nftables does not work in a namespace: {nft.stderr.strip()}"
    finally:
        _run("ip", "netns", "del", probe, check=False)
    return None


def has_netem() -> bool:
    """Whether this kernel has the netem queueing discipline (delay, loss)."""
    probe = f"jdnetem-{os.getpid()}"
    _run("ip", "link", "del", probe, check=False)
    if _run("ip", "link", "add", probe, "type", "dummy", check=False).returncode != 0:
        return False
    try:
        netem = ("tc", "qdisc", "add", "dev", probe, "root", "netem", "delay", "1ms")
        return _run(*netem, check=False).returncode == 0
    finally:
        _run("ip", "link", "del", probe, check=False)


def _lab_names() -> tuple[list[str], list[str]]:
    """This lab's namespaces and links, as `ip` lists them now."""
    listed = _run("ip", "-j", "netns", "list", check=False).stdout.strip()
    namespaces = [
        entry["name"]
        for entry in (json.loads(listed) if listed else [])
        if entry.get("name", "").startswith(f"{PREFIX}-")
    ]
    shown = _run("ip", "-j", "link", "show", check=False).stdout.strip()
    links = [
        entry["ifname"]
        for entry in (json.loads(shown) if shown else [])
        if entry.get("ifname", "").startswith(f"{PREFIX}-")
    ]
    return namespaces, links


def remove_leftovers() -> list[str]:
    """Delete every namespace and link of this lab (an earlier run's); returns names."""
    namespaces, _ = _lab_names()
    for name in namespaces:
        _run("ip", "netns", "del", name, check=False)
    _, links = _lab_names()  # what deleting the namespaces did not take with it
    for name in links:
        _run("ip", "link", "del", name, check=False)
    return namespaces + links


def take_lock(wait: float = LOCK_WAIT) -> IO[str]:
    """The machine-wide lab lock; waits for another lab (a parallel test) to finish."""
    lock = LOCK_FILE.open("w")
    deadline = time.monotonic() + wait
    while True:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return lock
        except BlockingIOError:
            if time.monotonic() > deadline:
                lock.close()
                raise NetLabUnavailable(
                    f"another chaos lab held {LOCK_FILE} for over {wait:g}s"
                ) from None
            time.sleep(0.2)


class NetLab:
    def __init__(self, hosts: int) -> None:
        if not 1 <= hosts <= 200:
            raise ValueError(f"hosts must be 1..200, not {hosts}")
        self.hosts = hosts
        self.netem = False
        self.leftovers: list[str] = []
        self._lock: IO[str] | None = None
        self._torn_down = False

    # ------------------------------------------------------------------ lifecycle
    def setup(self, lock: IO[str] | None = None) -> NetLab:
        """Build the lab (`lock`: the lab lock, when the caller already took it)."""
        reason = unavailable_reason()
        if reason:
            raise NetLabUnavailable(reason)
        self._lock = lock or take_lock()
        atexit.register(self.teardown)
        self.leftovers = remove_leftovers()
        self.netem = has_netem()
        _run("ip", "link", "add", BRIDGE, "type", "bridge")
        _run("ip", "addr", "add", f"{DB_ADDRESS}/24", "dev", BRIDGE)
        _run("ip", "link", "set", BRIDGE, "up")
        for index in range(self.hosts):
            self._add_host(index)
        return self

    def _add_host(self, index: int) -> None:
        ns, link = namespace(index), _link(index)
        _run("ip", "netns", "add", ns)
        _run("ip", "link", "add", link, "type", "veth", "peer", "name", "eth0", "netns", ns)
        _run("ip", "link", "set", link, "master", BRIDGE)
        _run("ip", "link", "set", link, "up")
        _run("ip", "-n", ns, "addr", "add", f"{host_address(index)}/24", "dev", "eth0")
        _run("ip", "-n", ns, "link", "set", "eth0", "up")
        _run("ip", "-n", ns, "link", "set", "lo", "up")
        self._nft(index, "add", "table", "inet", NFT_TABLE)
        for chain, hook in (("in", "input"), ("out", "output")):
            self._nft(
                index,
                "add", "chain", "inet", NFT_TABLE, chain,
                f"{{ type filter hook {hook} priority 0; policy accept; }}",
            )  # fmt: skip

    def teardown(self) -> list[str]:
        """Remove the lab; returns what was still there after (checked before the lock
        is released, so another lab cannot be among it)."""
        if self._torn_down or self._lock is None:
            return []
        self._torn_down = True
        left: list[str] = []
        with contextlib.suppress(Exception):
            remove_leftovers()
            namespaces, links = _lab_names()
            left = namespaces + links
        self._lock.close()
        return left

    # ------------------------------------------------------------------ processes
    def command(self, index: int, argv: list[str]) -> list[str]:
        """`argv` run inside host `index`'s namespace (same pid: `ip netns exec` execs)."""
        return ["ip", "netns", "exec", namespace(index), *argv]

    # ------------------------------------------------------------------ faults
    def cut(self, index: int) -> None:
        _run("ip", "link", "set", _link(index), "down")

    def heal(self, index: int) -> None:
        _run("ip", "link", "set", _link(index), "up")

    def drop(self, index: int, direction: str) -> None:
        """Drop the database's packets to the host (`in`) or the host's to it (`out`)."""
        if direction == "in":
            self._nft(index, "add", "rule", "inet", NFT_TABLE, "in", "ip", "saddr", DB_ADDRESS,
                      "drop")  # fmt: skip
        elif direction == "out":
            self._nft(index, "add", "rule", "inet", NFT_TABLE, "out", "ip", "daddr", DB_ADDRESS,
                      "drop")  # fmt: skip
        else:
            raise ValueError(f"direction must be 'in' or 'out', not {direction!r}")

    def undrop(self, index: int) -> None:
        for chain in ("in", "out"):
            self._nft(index, "flush", "chain", "inet", NFT_TABLE, chain)

    def degrade(self, index: int, loss_percent: int = 1) -> None:
        """`loss_percent` loss each way; with netem also 50 ms ± 20 ms delay on what
        the database sends to the host (so the round trip gains 50 ms ± 20 ms)."""
        if self.netem:
            _run("tc", "qdisc", "add", "dev", _link(index), "root", "netem", "delay", "50ms",
                 "20ms")  # fmt: skip
        for chain in ("in", "out"):
            self._nft(index, "add", "rule", "inet", NFT_TABLE, chain, "numgen", "random", "mod",
                      "100", "<", str(loss_percent), "drop")  # fmt: skip

    def restore(self, index: int) -> None:
        """Undo `degrade` and `drop`."""
        self.undrop(index)
        if self.netem:
            _run("tc", "qdisc", "del", "dev", _link(index), "root", check=False)

    def _nft(self, index: int, *args: str) -> None:
        _run("ip", "netns", "exec", namespace(index), "nft", *args)
