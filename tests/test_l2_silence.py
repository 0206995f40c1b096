# SPDX-License-Identifier: Apache-2.0
"""l2-timeout-ms bounds a connection's silence, not a command's size:
the tier (daemon/l2.c over l2_conn.c) through build/l2drive, on the daemon's default (50 ms of
silence), to a real redis-server behind a TCP proxy that throttles it
(bytes keep moving, slowly) or stops it (silence). A throttled transfer
many times longer than the timeout completes, exact; a stalled one ends
as a timeout of the silence detector (not of the 10 s cap on every
command, L2_CMD_MAX_MS: the counter `overruns` tells the two apart) in a
small multiple of the timeout; one stall is one failure, and the breaker
opens only after five in a row (L2_TRIP); a server that trickles bytes,
never silent for the timeout, is ended by the cap; a put, which nothing
waits on, outlasts a pause of Redis (DEBUG SLEEP) that ends a get. The proxy is a
Python process on a shared machine: where it went quiet itself for the
timeout, a timeout is right and the transfer is tried again; a timeout
while its bytes kept moving is a failure."""
import os
import socket
import threading
import time
from typing import Callable, Dict, List, Tuple

from harness import Daemon
from redis_fixture import RedisServer
from test_l2 import Client, secret_file
from test_l2_live import L2DRIVE, Drive

KEY = "9e" * 32
SILENCE_MS = 50         # l2-timeout-ms's default (daemon/l2.c, L2_DEFAULT_TIMEOUT_MS)
CAP_S = 10              # no command outlives this (daemon/l2.c, L2_CMD_MAX_MS)
TRIP = 5                # consecutive failures that open a breaker (L2_TRIP)
# A stall ends within this: a few periods of the silence timeout (the
# timer re-armed when this process ran late), plus the start of a new
# connection, plus margin for a loaded machine; a fifth of the cap, so an
# end by the cap cannot pass for one by the silence detector.
STALL_END_S = 2.0
# This proxy is a Python process on a shared machine: starved of the CPU,
# it goes quiet itself, and a timeout then is the detector right. A gap
# this long between two of its forwards in a transfer's direction excuses
# a timeout (and the transfer is tried again, at most ATTEMPTS times); a
# timeout while every gap was shorter is the detector wrong, a failure.
QUIET_S = SILENCE_MS * 0.8 / 1000
ATTEMPTS = 4            # fewer than TRIP: retries never open the breaker


class Throttle:
    """A TCP proxy on 127.0.0.1 to target_port: each direction forwards at
    most chunk bytes every gap_s; stall() stops forwarding (connections
    stay open), flow() resumes. quiet["up"] (client to Redis) and
    quiet["down"] are the longest gaps between two forwards of a direction
    since reset(): how long the link itself went quiet; moved[...], the
    bytes forwarded that way since reset()."""

    def __init__(self, target_port: int, chunk: int = 32 << 10, gap_s: float = 0.01):
        self.target = target_port
        self.chunk, self.gap = chunk, gap_s
        self.moving = threading.Event()
        self.moving.set()
        self.closed = False
        # Small buffers, set before the connections exist (the accepted
        # ones inherit the listener's): a slow link, whose bytes in flight
        # are few and acknowledged as they cross.
        self.listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 16 << 10)
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(16)
        self.port = self.listener.getsockname()[1]
        self.socks: List[socket.socket] = []
        self.reset()
        threading.Thread(target=self._accept, daemon=True).start()

    def reset(self):
        self.last: Dict[str, float] = {}
        self.quiet = {"up": 0.0, "down": 0.0}
        self.moved = {"up": 0, "down": 0}

    def _accept(self):
        while not self.closed:
            try:
                c, _ = self.listener.accept()
            except OSError:
                return
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 16 << 10)
            s.connect(("127.0.0.1", self.target))
            for x in (c, s):
                x.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self.socks += [c, s]
            threading.Thread(target=self._pump, args=(c, s, "up"), daemon=True).start()
            threading.Thread(target=self._pump, args=(s, c, "down"), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket, way: str):
        try:
            while True:
                self.moving.wait()
                data = src.recv(self.chunk)
                if not data:
                    break
                self.moving.wait()
                dst.sendall(data)
                self.moved[way] += len(data)
                now = time.monotonic()
                if way in self.last:
                    self.quiet[way] = max(self.quiet[way], now - self.last[way])
                self.last[way] = now
                time.sleep(self.gap)
        except OSError:
            pass
        for x in (src, dst):
            try:
                x.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def stall(self):
        self.moving.clear()

    def flow(self):
        self.moving.set()

    def close(self):
        self.closed = True
        self.moving.set()
        self.listener.close()
        for x in self.socks:
            x.close()


def _timed(d, line: str, timeout: float = 60) -> Tuple[str, float]:
    t0 = time.monotonic()
    r = d.cmd(line, timeout=timeout)
    return r, time.monotonic() - t0


def _through(proxy: Throttle, d, way: str, what: str, run: Callable[[], bool]) -> int:
    """run() (True: done without a timeout) until it is, at most ATTEMPTS
    times; each timeout must come with the link quiet for QUIET_S in
    direction way. Returns the timeouts so excused."""
    excused = 0
    for _ in range(ATTEMPTS):
        proxy.reset()
        t0 = d.counters()["timeouts"]
        if run():
            return excused
        c = d.counters()
        assert c["timeouts"] > t0, (what, c)
        assert proxy.quiet[way] >= QUIET_S, \
            "%s timed out while bytes moved every %.0f ms at most: %s" % (
                what, proxy.quiet[way] * 1000, c)
        print("     %s timed out, the proxy quiet for %.0f ms: again" % (what, proxy.quiet[way] * 1000))
        excused += c["timeouts"] - t0
    raise AssertionError("%s: the proxy went quiet in each of %d attempts (a machine too "
                         "loaded for a 50 ms bound)" % (what, ATTEMPTS))


def test_l2_throttled_transfer_outlives_the_timeout_stall_does_not():
    if not os.path.exists(L2DRIVE):
        raise AssertionError("%s not built (make all)" % L2DRIVE)
    with RedisServer(tcp=True) as r:
        proxy = Throttle(r.port)
        url = "redis://127.0.0.1:%d/0" % proxy.port
        d = Drive(url, r.tmp)           # the defaults: 50 ms of silence, 1 GiB values
        try:
            # 6 MiB at about 3 MiB/s each way: seconds, against 50 ms of
            # silence (the old allowance was 100 ms + 1 ms per 256 KiB).
            data = os.urandom(6 << 20)

            def put() -> bool:
                c0 = d.counters()
                t0 = time.monotonic()
                d.put(KEY, data)
                c = d.wait(lambda c: sum(c[n] - c0[n] for n in ("writes", "timeouts", "errors"))
                           >= 1, "the throttled write", tries=3000, ms=20)
                took = time.monotonic() - t0
                assert c["errors"] == c0["errors"], c
                if c["writes"] == c0["writes"]:
                    return False
                assert took > 0.5, "not throttled: %.2f s" % took   # the test's premise
                return True
            out = os.path.join(r.tmp, "got")

            def get() -> bool:
                got, took = _timed(d, "get %s %s" % (KEY, out), timeout=120)
                if not got.startswith("hit"):
                    return False
                assert took > 0.5, "not throttled: %.2f s" % took
                with open(out, "rb") as f:
                    assert f.read() == data
                return True
            excused = _through(proxy, d, "up", "the throttled write", put)
            excused += _through(proxy, d, "down", "the throttled read", get)
            c = d.counters()
            assert c["timeouts"] == excused and c["breaker_opens"] == 0, c
            # Silence: the same connection stalled times out, by the
            # silence detector, well before the cap would end it.
            proxy.stall()
            for i in range(1, TRIP + 1):
                got, took = _timed(d, "get " + KEY, timeout=CAP_S * 3)
                c = d.counters()
                assert got.startswith("miss sync=0"), (i, got, c)
                assert took < STALL_END_S, "stall %d ended after %.2f s: %s" % (i, took, c)
                assert c["timeouts"] == excused + i and c["overruns"] == 0, (i, c)
                # One stall is one failure; the breaker opens at the fifth.
                assert c["breaker_opens"] == (1 if i == TRIP else 0), (i, c)
                print("     stall %d ended after %.3f s" % (i, took))
            assert c["breaker_open"] == 1, c
            # Open: answered at once, Redis not asked.
            assert d.cmd("get " + KEY).startswith("miss sync=1"), d.counters()
            proxy.flow()
            # After the open period (1 s) a probe finds the link moving.
            deadline = time.monotonic() + 30
            while not d.cmd("get " + KEY, timeout=120).startswith("hit"):
                assert time.monotonic() < deadline, d.counters()
                d.cmd("sleep 100")
            c = d.counters()
            assert c["breaker_open"] == 0 and c["overruns"] == 0, c
        finally:
            d.close()
            proxy.close()


def test_l2_a_trickle_never_silent_for_the_timeout_still_ends():
    """A server whose bytes trickle (64 bytes every 20 ms: never silent for
    the default 50 ms) holds no command past its bound (10 s, l2_conn.c's
    L2_CMD_MAX_MS): a 512 KiB value's get, minutes at that rate, ends as a
    timeout and a miss within the cap and a margin, ended by the cap
    (`overruns`), and the connection's next command is a fresh one."""
    if not os.path.exists(L2DRIVE):
        raise AssertionError("%s not built (make all)" % L2DRIVE)
    with RedisServer(tcp=True) as r:
        data = os.urandom(512 << 10)
        w = Drive(r.url, r.tmp)
        try:
            w.put(KEY, data)
            w.wait(lambda c: c["writes"] == 1, "the write")
        finally:
            w.close()
        proxy = Throttle(r.port, chunk=64, gap_s=0.02)
        d = Drive("redis://127.0.0.1:%d/0" % proxy.port, r.tmp)
        try:
            for attempt in range(1, ATTEMPTS):
                proxy.reset()
                c0 = d.counters()
                got, took = _timed(d, "get " + KEY, timeout=CAP_S * 6)
                c = d.counters()
                assert got.startswith("miss"), (got, c)
                assert c["timeouts"] == c0["timeouts"] + 1 and c["hits"] == 0, (c, took)
                if c["overruns"] == c0["overruns"] + 1:
                    break
                # The silence detector ended it: right only if the trickle
                # itself stopped for the timeout (the proxy starved).
                assert proxy.quiet["down"] >= QUIET_S, \
                    "a trickle (a gap of %.0f ms at most) ended as a silence after %.1f s: %s" % (
                        proxy.quiet["down"] * 1000, took, c)
                print("     the trickle stopped for %.0f ms (the proxy starved): again" %
                      (proxy.quiet["down"] * 1000))
            else:
                raise AssertionError("the proxy went quiet in each of %d attempts" % attempt)
            # The cap ended it (the silence detector never fired), at the
            # cap: not before it (a command ends no sooner than
            # L2_CMD_MAX_MS after it was sent, which was after t0), within
            # a period and a margin after it; and the trickle kept coming
            # meanwhile: more bytes than it brings in a tenth of the cap (a
            # detector that cut it off early, or a cap too short, lets
            # fewer through).
            assert took >= CAP_S, "a trickling get ended before the cap, after %.1f s" % took
            assert took < CAP_S + 5, "a trickling get ended after %.1f s" % took
            assert proxy.moved["down"] > proxy.chunk * (CAP_S / 10) / proxy.gap, \
                "the trickle was cut off after %d bytes" % proxy.moved["down"]
            print("     a trickling server's get ended after %.1f s" % took)
            proxy.chunk, proxy.gap = 1 << 20, 0
            out = os.path.join(r.tmp, "got")
            assert d.cmd("get %s %s" % (KEY, out), timeout=60).startswith("hit"), d.counters()
            with open(out, "rb") as f:
                assert f.read() == data
        finally:
            d.close()
            proxy.close()


def test_a_put_outlasts_a_pause_of_redis_that_would_end_a_get():
    """No request waits on a put, so its connection may be silent for
    L2_PUT_SILENCE_MS (1 s; l2.c) where a get's may be for l2-timeout-ms
    (50 ms): a Redis that stops for a moment (DEBUG SLEEP, as one starved
    of the CPU on a loaded node) while a large value goes in loses it no
    more; a get in the same pause ends as a timeout, and a put in a pause
    past the bound ends too."""
    with RedisServer() as r:
        d = Drive(r.url, r.tmp)
        try:
            data = os.urandom(8 << 20)      # 8 chunks, two windows
            ends = ("writes", "timeouts", "errors")

            def put_in_pause(key: str, pause_s: float) -> Dict[str, int]:
                c0 = d.counters()
                sleeper = r.sleep(pause_s)
                d.put(key, data)
                c = d.wait(lambda c: sum(c[n] - c0[n] for n in ends) >= 1, "the put",
                           tries=1000, ms=20)
                sleeper.join()
                return {n: c[n] - c0[n] for n in ends}
            assert put_in_pause(KEY, 0.3) == {"writes": 1, "timeouts": 0, "errors": 0}
            out = os.path.join(r.tmp, "got")
            assert d.get(KEY, out)[0] == "hit"
            with open(out, "rb") as f:
                assert f.read() == data
            # The get's bound is the short one.
            c0 = d.counters()
            sleeper = r.sleep(0.3)
            assert d.get(KEY)[0] == "miss"
            sleeper.join()
            assert d.counters()["timeouts"] == c0["timeouts"] + 1, d.counters()
            # A put's bound is a bound: silent for a whole period of it
            # (its timer armed again once after the last bytes moved).
            got = put_in_pause("ab" * 32, 3)
            assert got == {"writes": 0, "timeouts": 1, "errors": 0}, (got, d.counters())
        finally:
            d.close()


def test_a_tier_get_nobody_waits_for_any_more_stops_fetching_its_chunks():
    """A second node's get of a 32 MiB artifact over a slow link (about
    3 MiB/s): its client waits 1 s (wait_ms) and is answered a miss; the
    node then fetches no more of the value's chunks than were already
    asked for (l2.c, l2_get_abandon()), where it used to fetch the whole
    value for no one."""
    n = 32 << 20
    v = os.urandom(n)
    with RedisServer(tcp=True) as r:
        secret = secret_file(r.tmp)
        with Daemon(workers=1, extra=["--l2", r.url, "--l2-secret-file", secret]) as a:
            with Client(a.socket) as c:
                assert c.artifact_put("t", "big", v)
            a.wait_stats(lambda s: s["l2_writes"] == 1, "the value published")
        proxy = Throttle(r.port)
        try:
            url = "redis://127.0.0.1:%d/0" % proxy.port
            with Daemon(workers=1, extra=["--l2", url, "--l2-secret-file", secret]) as b:
                with Client(b.socket) as c:
                    assert c.artifact_get("t", "big", wait_ms=1000).value is None
                s = b.wait_stats(lambda s: s["l2_abandoned"] + s["l2_hits"] >= 1,
                                 "the transfer's end")
                assert s["l2_abandoned"] == 1 and s["l2_hits"] == 0, s
                moved = -1
                while proxy.moved["down"] != moved:     # until the link is still
                    moved = proxy.moved["down"]
                    time.sleep(1)
                # What was asked for when the client left: about 3 MiB in
                # its second, and the window of chunks out (4 MiB).
                assert moved < n // 2, "%d bytes of a %d-byte value fetched for no one" % (moved, n)
                print("     %.1f MiB of 32 crossed" % (moved / (1 << 20)))
        finally:
            proxy.close()
