"""A TCP relay that adds 50 ms ± 20 ms to what the database sends, when switched on.

For kernels without `sch_netem` (`tests.chaos.netlab.has_netem()` is False): one host's
workers reach PostgreSQL through this relay (listening on the bridge address) instead
of directly. While `delaying` is set, every chunk the server sends waits a normally
distributed 50 ms ± 20 ms (clipped to 10..120 ms) before it is passed on — never
overtaking the previous chunk, since a TCP stream cannot be reordered — so every
round trip of that host gets slower, as with `tc qdisc ... netem delay 50ms 20ms`.
Packet loss comes from nftables on the host's link either way. Switched off, the
relay passes bytes straight through.
"""

from __future__ import annotations

import contextlib
import random
import socket
import threading
import time
from collections import deque

MEAN, JITTER, LOW, HIGH = 0.050, 0.020, 0.010, 0.120


class LatencyRelay:
    def __init__(self, listen: str, target: tuple[str, int], seed: int = 0) -> None:
        self.target = target
        self.delaying = threading.Event()
        self._rng = random.Random(seed)
        self._rng_lock = threading.Lock()
        self._server = socket.create_server((listen, 0))
        self.address = (listen, int(self._server.getsockname()[1]))
        self._closing = threading.Event()
        self._sockets: list[socket.socket] = []
        self._lock = threading.Lock()
        self.connections = 0

    def start(self) -> LatencyRelay:
        threading.Thread(target=self._accept, name="latency-relay", daemon=True).start()
        return self

    def stop(self) -> None:
        self._closing.set()
        with contextlib.suppress(OSError):
            self._server.close()
        with self._lock:
            for sock in self._sockets:
                with contextlib.suppress(OSError):
                    sock.close()

    def _delay(self) -> float:
        if not self.delaying.is_set():
            return 0.0
        with self._rng_lock:
            return min(HIGH, max(LOW, self._rng.gauss(MEAN, JITTER)))

    def _accept(self) -> None:
        while not self._closing.is_set():
            try:
                client, _ = self._server.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection(self.target, timeout=5)
            except OSError:
                client.close()
                continue
            upstream.settimeout(None)
            for sock in (client, upstream):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            with self._lock:
                self._sockets += [client, upstream]
                self.connections += 1
            self._pump(client, upstream, delayed=False)
            self._pump(upstream, client, delayed=True)

    def _pump(self, source: socket.socket, sink: socket.socket, *, delayed: bool) -> None:
        queue: deque[tuple[float, bytes]] = deque()
        ready = threading.Condition()

        def read() -> None:
            release = 0.0
            try:
                while chunk := source.recv(65536):
                    if delayed:
                        release = max(release, time.monotonic() + self._delay())
                    with ready:
                        queue.append((release, chunk))
                        ready.notify()
            except OSError:
                pass
            with ready:
                queue.append((0.0, b""))  # end of stream
                ready.notify()

        def write() -> None:
            try:
                while True:
                    with ready:
                        while not queue:
                            ready.wait()
                        release, chunk = queue.popleft()
                    if not chunk:
                        break
                    wait = release - time.monotonic()
                    if wait > 0:
                        time.sleep(wait)
                    sink.sendall(chunk)
            except OSError:
                pass
            for sock in (sink, source):
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)

        threading.Thread(target=read, daemon=True).start()
        threading.Thread(target=write, daemon=True).start()
