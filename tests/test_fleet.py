# SPDX-License-Identifier: Apache-2.0
"""Once in the fleet (daemon/l2_fleet.c): nodes (real daemons, each its own
store and socket) on one real redis-server, clients on each asking for the
same artifact with a lease, as a JIT's processes do. One node produces;
the others wait for its value in the tier and never produce; a producer
node killed, or one that releases, is replaced; a node cut off from the
tier produces on its own; a waiter's own bound holds. The tier runs on the
daemon's defaults but for the lease timeout where a test is about it."""
import os
import signal
import tempfile
import threading
import time

from harness import Daemon, Skip
from redis_fixture import RedisServer
from test_artifact import Client

SECRET = b"fleet test secret\n"
NOBODY = 65534


def _nodes(r, tmp, n, *extra, url=None):
    secret = os.path.join(tmp, "secret")
    with open(secret, "wb") as f:
        f.write(SECRET)
    return [Daemon(workers=1, extra=["--l2", url or r.url, "--l2-secret-file", secret]
                   + list(extra)) for _ in range(n)]


def _get_later(node, out, key, **kw):
    """A get with a lease on node, in a thread: its reply lands in out."""
    def run():
        c = Client(node.socket, timeout=60)
        out["reply"] = c.get("inductor-fx", key, lease=True, **kw)
        out["at"] = time.time()
        out["client"] = c
    t = threading.Thread(target=run)
    t.start()
    return t


def test_a_node_that_misses_while_another_produces_waits_for_its_value():
    with RedisServer() as r:
        a, b = _nodes(r, r.tmp, 2)
        try:
            pa = Client(a.socket)
            assert "lease" in pa.get("inductor-fx", "graph", lease=True)
            b.wait_stats(lambda s: True, "b up")
            out = {}
            t = _get_later(b, out, "graph")
            # b asked the tier, found a's lease, and waits (progress frames).
            b.wait_stats(lambda s: s["fleet_waits"] == 1, "b waiting on a's lease")
            time.sleep(1.0)
            assert "reply" not in out, out
            value = os.urandom(3 << 20)         # chunked in the tier
            assert pa.put("inductor-fx", "graph", value, lease=pa.get(
                "inductor-fx", "graph", lease=True)["lease"])["stored"]
            t.join(30)
            assert out["reply"].get("found") and out["reply"]["value"] == value, out
            assert "lease" not in out["reply"]
            sa, sb = a.stats(), b.stats()
            assert sa["fleet_leases"] == 1 and sb["fleet_leases"] == 0, (sa, sb)
            assert sb["fleet_wait_hits"] == 1 and sb["artifact_leases"] == 0, sb
            out["client"].close()
            pa.close()
        finally:
            for d in (a, b):
                d.cleanup()


def test_sixteen_clients_on_eight_nodes_one_producer():
    with RedisServer() as r:
        nodes = _nodes(r, r.tmp, 8)
        try:
            for d in nodes:
                d.wait_stats(lambda s: True, "up")
            outs = [{} for _ in range(16)]
            threads = [_get_later(nodes[i % 8], outs[i], "kernel") for i in range(16)]
            # Exactly one client in the fleet is told to produce.
            deadline = time.time() + 30
            while sum("reply" in o for o in outs) < 1:
                assert time.time() < deadline, "nobody was given the lease"
                time.sleep(0.02)
            time.sleep(1.5)
            producers = [o for o in outs if "reply" in o and "lease" in o["reply"]]
            assert len(producers) == 1, [o.get("reply") for o in outs]
            p = producers[0]
            value = os.urandom(1 << 20)
            assert p["client"].put("inductor-fx", "kernel", value,
                                   lease=p["reply"]["lease"])["stored"]
            for t in threads:
                t.join(30)
            others = [o for o in outs if o is not p]
            assert all(o["reply"].get("found") and o["reply"]["value"] == value
                       for o in others), [o.get("reply", {}).get("found") for o in others]
            assert sum(d.stats()["fleet_leases"] for d in nodes) == 1
            assert sum(d.stats()["artifact_leases"] for d in nodes) == 1
            for o in outs:
                o["client"].close()
        finally:
            for d in nodes:
                d.cleanup()


def test_a_killed_producer_node_is_replaced_within_the_lease_timeout():
    with RedisServer() as r:
        a, b = _nodes(r, r.tmp, 2, "--l2-lease-timeout", "2")
        try:
            pa = Client(a.socket)
            assert "lease" in pa.get("inductor-fx", "graph", lease=True)
            out = {}
            t = _get_later(b, out, "graph")
            b.wait_stats(lambda s: s["fleet_waits"] == 1, "b waiting on a's lease")
            t0 = time.time()
            a.proc.send_signal(signal.SIGKILL)      # its lease is never renewed
            a.proc.wait()
            t.join(30)
            took = out["at"] - t0
            # b takes the lease over: lease timeout (2 s) + a poll (<= 1 s).
            assert "lease" in out["reply"] and not out["reply"]["found"], out
            assert took < 3.5 + 2, took
            assert b.stats()["fleet_takeovers"] == 1
            value = b"b made it"
            assert out["client"].put("inductor-fx", "graph", value,
                                     lease=out["reply"]["lease"])["stored"]
            out["client"].close()
            pa.close()
        finally:
            for d in (a, b):
                d.cleanup()


def test_a_release_hands_the_fleet_lease_on_at_once():
    with RedisServer() as r:
        a, b = _nodes(r, r.tmp, 2)          # lease timeout 10 s: a release is sooner
        try:
            pa = Client(a.socket)
            lease = pa.get("inductor-fx", "graph", lease=True)["lease"]
            out = {}
            t = _get_later(b, out, "graph")
            b.wait_stats(lambda s: s["fleet_waits"] == 1, "b waiting on a's lease")
            t0 = time.time()
            pa.call(12, lease=lease)                # artifact_release
            t.join(30)
            assert "lease" in out["reply"], out
            assert out["at"] - t0 < 5, out["at"] - t0
            assert b.stats()["fleet_takeovers"] == 1
            out["client"].close()
            pa.close()
        finally:
            for d in (a, b):
                d.cleanup()


def test_a_failed_compile_hands_the_fleet_lease_on_at_once():
    """A compile that ends with nothing to publish (its worker killed at
    a's job timeout, here 2 s: the setting is the fault) gives its fleet
    lease up as its flight ends (flight.c: fleet_end(, 0)): b, waiting on
    that lease, takes it over at its next poll (<= 1 s), not when it would
    lapse (l2-lease-timeout, 10 s by default), and compiles it itself.
    On the defaults (sharing = confirm: the lease is the user's own key's,
    as a's compile is new) but for a's job timeout."""
    from harness import PROBE_DAEMON, small_ir
    ir = b"; ptxcache-probe: slow 5\n" + small_ir("fleet_failed")
    with RedisServer() as r:
        secret = os.path.join(r.tmp, "secret")
        with open(secret, "wb") as f:
            f.write(SECRET)
        common = ["--l2", r.url, "--l2-secret-file", secret]     # sharing = confirm
        a = Daemon(workers=1, binary=PROBE_DAEMON, extra=common + ["--job-timeout", "2"])
        b = Daemon(workers=1, binary=PROBE_DAEMON, extra=common)
        try:
            out = {}
            t = threading.Thread(target=lambda: out.update(
                a=a.cli("compile", "--arch", "sm_90a", "-", "-o", "-", input=ir, check=False)))
            t.start()
            a.wait_stats(lambda s: s["jobs_running"] >= 1, "a's compile")
            got = {}
            tb = threading.Thread(target=lambda: got.update(
                b=b.cli("compile", "--arch", "sm_90a", "-", "-o", "-", input=ir)))
            tb.start()
            b.wait_stats(lambda s: s["fleet_waits"] == 1, "b waiting on a's lease")
            sa = a.wait_stats(lambda s: s["worker_timeouts"] == 1, "a's compile timing out")
            t0 = time.time()
            sb = b.wait_stats(lambda s: s["fleet_takeovers"] == 1, "b taking the lease over")
            took = time.time() - t0
            t.join(60)
            tb.join(60)
            assert out["a"].returncode != 0, out["a"]
            assert got["b"].returncode == 0 and b".entry k_fleet_failed" in got["b"].stdout, got
            assert sa["l2_writes"] == 0, sa
            # Its next poll (<= 1 s) and margin; the lease would lapse at 10 s.
            assert took < 5, "b took the lease over %.1f s after a's compile failed" % took
            assert b.stats()["compiles"] == 1, b.stats()
            print("     b took the lease over %.2f s after a's compile failed" % took)
        finally:
            for d in (a, b):
                d.cleanup()


def test_a_node_cut_off_from_the_tier_produces_on_its_own():
    with RedisServer() as r:
        tmp = tempfile.mkdtemp()
        (a,) = _nodes(r, tmp, 1, url="unix:" + os.path.join(tmp, "no-redis.sock"))
        try:
            c = Client(a.socket)
            t0 = time.time()
            got = c.get("inductor-fx", "graph", lease=True)
            assert "lease" in got and not got["found"], got
            assert time.time() - t0 < 5
            assert a.stats()["fleet_leases"] == 0
            c.close()
        finally:
            a.cleanup()


def test_a_waiters_own_bound_holds_while_another_node_produces():
    with RedisServer() as r:
        a, b = _nodes(r, r.tmp, 2)
        try:
            pa = Client(a.socket)
            assert "lease" in pa.get("inductor-fx", "graph", lease=True)
            t0 = time.time()
            c = Client(b.socket)
            got = c.get("inductor-fx", "graph", lease=True, wait_ms=1500)
            took = time.time() - t0
            # Its bound passed while a produces: a miss, answered in time.
            assert not got["found"], got
            assert 1.4 < took < 5, took
            c.close()
            pa.close()
        finally:
            for d in (a, b):
                d.cleanup()


def test_a_compile_runs_once_in_the_fleet_when_a_node_joins_late():
    """Under sharing = trust (a result is published when done): node b asks
    for a kernel 1 s into node a's 4 s compile of it, waits for a's value
    in the tier, and compiles nothing; the answer is the bytes a compiled."""
    from harness import PROBE_DAEMON, small_ir
    ir = b"; ptxcache-probe: slow 4\n" + small_ir("fleet_late")
    with RedisServer() as r:
        secret = os.path.join(r.tmp, "secret")
        with open(secret, "wb") as f:
            f.write(SECRET)
        a, b = (Daemon(workers=1, binary=PROBE_DAEMON,
                       extra=["--l2", r.url, "--l2-secret-file", secret, "--sharing", "trust"])
                for _ in range(2))
        try:
            out = {}
            t = threading.Thread(target=lambda: out.update(
                a=a.cli("compile", "--arch", "sm_90a", "-", "-o", "-", input=ir)))
            t.start()
            a.wait_stats(lambda s: s["jobs_running"] >= 1, "a's compile")
            time.sleep(1.0)
            t0 = time.time()
            got = b.cli("compile", "--arch", "sm_90a", "-", "-o", "-", input=ir)
            took = time.time() - t0
            t.join(60)
            assert got.returncode == 0 and got.stdout == out["a"].stdout, got.stderr
            assert b".entry k_fleet_late" in got.stdout, got.stdout[:200]
            sa, sb = a.stats(), b.stats()
            assert sa["compiles"] == 1 and sb["compiles"] == 0, (sa, sb)
            assert sb["fleet_waits"] == 1 and sb["fleet_wait_hits"] == 1, sb
            assert sa["fleet_leases"] == 1, sa
            print("     b joined 1 s into a's 4 s compile: answered in %.1f s" % took)
        finally:
            for d in (a, b):
                d.cleanup()


def test_under_confirm_a_users_compile_runs_once_in_the_fleet_for_that_user():
    """On the defaults (sharing = confirm, where Redis's value for everyone
    waits for a confirmation): b's client asks for a kernel 1 s into a's
    4 s compile of it for the same user, waits on a's lease for that
    user's own value (Redis key own:u0:...), and compiles nothing; no value
    for everyone is in Redis yet. Another user on b is not served it: b
    compiles it for them, which confirms it, and publishes it for all."""
    from harness import PROBE_DAEMON, small_ir
    from sysutil import cli_as, make_reachable
    if os.geteuid() != 0:
        raise Skip("needs root to run a client as another user")
    ir = b"; ptxcache-probe: slow 4\n" + small_ir("fleet_own")
    compile_args = ("compile", "--arch", "sm_90a", "-", "-o", "-")
    with RedisServer() as r:
        secret = os.path.join(r.tmp, "secret")
        with open(secret, "wb") as f:
            f.write(SECRET)
        a, b = (Daemon(workers=1, binary=PROBE_DAEMON,
                       extra=["--l2", r.url, "--l2-secret-file", secret,
                              "--allow-users", str(NOBODY)])
                for _ in range(2))
        make_reachable(b.socket)
        try:
            out = {}
            t = threading.Thread(target=lambda: out.update(a=a.cli(*compile_args, input=ir)))
            t.start()
            a.wait_stats(lambda s: s["jobs_running"] >= 1, "a's compile")
            time.sleep(1.0)
            got = b.cli(*compile_args, input=ir)
            t.join(60)
            assert got.returncode == 0 and got.stdout == out["a"].stdout, got.stderr
            assert b".entry k_fleet_own" in got.stdout, got.stdout[:200]
            sa, sb = a.stats(), b.stats()
            assert sa["compiles"] == 1 and sb["compiles"] == 0, (sa, sb)
            assert sa["fleet_leases"] == 1 and sb["fleet_wait_hits"] == 1, (sa, sb)
            # a's confirmation (4 s more, in idle time) has not ended: what
            # Redis holds is root's own value alone.
            assert sa["confirmations"] == 0, sa
            a.cleanup()
            values = [k for k in r.keys() if not k.endswith(":lease")]
            assert values and all(k.startswith("ptxcache:own:u0:") for k in values), values
            # Another user on b: compiled for them, not served root's.
            other = cli_as(b.socket, NOBODY, NOBODY, *compile_args, input=ir)
            assert other.returncode == 0 and other.stdout == got.stdout, other.stderr
            sb = b.wait_stats(lambda s: s["l2_writes"] >= 1, "the confirmed value published")
            assert sb["compiles"] == 1 and sb["confirmations"] == 1, sb
            assert any(not k.startswith("ptxcache:own:") and not k.endswith(":lease")
                       for k in r.keys()), r.keys()
        finally:
            for d in (a, b):
                d.cleanup()
