# SPDX-License-Identifier: Apache-2.0
"""The shared tier on a real Redis Cluster (redis_fixture.RedisCluster: 3
masters with a replica each, made by redis-cli --cluster create), through
build/l2drive (the tier's files alone; see test_l2_live.py) and through real
daemons: values cross exact, keys spread over the masters, and under
faults (a master killed and its replica promoted, a slot migrated during
load, one shard frozen, the cluster full, the whole cluster gone and back)
every answer is exact or a miss, comes within the test's own deadline, and
hits resume. Nothing here measures speed."""
import os
import tempfile
import threading
import time
from typing import Dict, List, Optional, Tuple

import harness
from harness import TRITON_FLAGS, Daemon, llc, triton_kernels
from redis_fixture import RedisCluster, RedisError
from test_l2_live import L2DRIVE, Drive

PREFIX = "ptxcache:"
ANSWER_S = 10           # every get is answered within this, whatever the fault


def _crc16(data: bytes) -> int:
    crc = 0
    for b in data:
        crc ^= b << 8
        for _ in range(8):
            crc = ((crc << 1) ^ 0x1021) if crc & 0x8000 else crc << 1
            crc &= 0xFFFF
    return crc


def slot_of(key: str) -> int:
    """The Redis Cluster hash slot, hash tags included (as l2_cluster.c)."""
    k = key.encode()
    i = k.find(b"{")
    if i >= 0:
        j = k.find(b"}", i + 1)
        if j > i + 1:
            k = k[i + 1:j]
    return _crc16(k) % 16384


def keys(n: int, seed: int = 1) -> List[str]:
    return ["%064x" % (seed * 1000003 + i * 7919) for i in range(n)]


def value(k: str) -> bytes:
    """A value of its own per key, 1 KiB to about 200 KiB."""
    n = 1024 + int(k[-6:], 16) % (200 << 10)
    return (k.encode() * (n // 64 + 1))[:n]


def _setup(**kw) -> RedisCluster:
    if not os.path.exists(L2DRIVE):
        raise AssertionError("%s not built (make all)" % L2DRIVE)
    return RedisCluster(**kw)


def get(d: Drive, k: str, want: Optional[bytes]) -> str:
    """d's answer for k, within ANSWER_S: "hit" (bytes exactly want) or
    "miss"."""
    out = os.path.join(d.tmp, "got-%d" % id(d))
    if os.path.exists(out):
        os.unlink(out)
    r = d.cmd("get %s %s" % (k, out), timeout=ANSWER_S)
    word = r.split()[0]
    assert word in ("hit", "miss"), r
    if word == "hit":
        with open(out, "rb") as f:
            got = f.read()
        assert want is not None and got == want, "%s: a hit with the wrong bytes" % k
    return word


def publish(d: Drive, ks: List[str], rounds: int = 3):
    """Put ks through d and wait until each publish has ended. Under a
    fault (a master killed or frozen, a slot moving, the cluster full) a
    master may fall silent for the timeout and end a publish as a timeout:
    what then does not read back is put again, in at most rounds rounds.
    On a healthy cluster no publish times out (the silence detector does
    not count this side's delays, a loaded machine's included): the
    healthy tests assert timeouts == 0 after it."""
    todo = list(ks)
    for _ in range(rounds):
        c0 = d.counters()
        for k in todo:
            d.put(k, value(k))
        ended = lambda c: sum(c[n] - c0[n] for n in ("writes", "errors", "timeouts"))
        c1 = d.wait(lambda c: ended(c) >= len(todo), "the publishes' ends", tries=500)
        if c1["timeouts"] == c0["timeouts"]:
            return
        # Puts are dropped while a breaker is open: the gets probe it.
        deadline = time.time() + ANSWER_S
        while True:
            todo = [k for k in todo if get(d, k, value(k)) != "hit"]
            if not todo:
                return
            if not d.counters()["breaker_open"] or time.time() > deadline:
                break
            d.cmd("sleep 200")
    raise AssertionError("publishes still timing out after %d rounds: %s" % (rounds, d.counters()))


def by_owner(c: RedisCluster, ks: List[str], prefix: str = PREFIX) -> Dict[int, List[str]]:
    """Keys by the port of the master that serves their slot now."""
    slots = c.slots()
    out: Dict[int, List[str]] = {}
    for k in ks:
        s = slot_of(prefix + k)
        port = next(e[2][1] for e in slots if e[0] <= s <= e[1])
        out.setdefault(port, []).append(k)
    return out


def eventually_all_hit(d: Drive, ks: List[str], what: str, limit: float = 90):
    deadline = time.time() + limit
    left = list(ks)
    while left:
        left = [k for k in left if get(d, k, value(k)) != "hit"]
        if left:
            assert time.time() < deadline, "%s: %d keys never hit again; %s" % (
                what, len(left), d.counters())
            d.cmd("sleep 100")


def test_cluster_values_cross_exact_and_spread_over_the_masters():
    with _setup() as c, tempfile.TemporaryDirectory() as t:
        a, b = Drive(c.url, t), Drive(c.seed_url(c.nodes[-1]), t)   # b knows one seed
        try:
            ks = keys(90)
            publish(a, ks)
            for k in ks:
                assert get(b, k, value(k)) == "hit", k
            # Each key on the master of its slot, and every master has some.
            masters = c.masters()
            assert len(masters) == 3
            for m in masters:
                assert m.dbsize() > 0, "master %d holds no key" % m.port
            assert sum(m.dbsize() for m in masters) == len(ks)
            owners = by_owner(c, ks)
            assert len(owners) == 3
            for port, mine in owners.items():
                m = c.by_port(port)
                for k in mine:
                    assert m.command("EXISTS", PREFIX + k) == 1
                    assert m.command("CLUSTER", "COUNTKEYSINSLOT", slot_of(PREFIX + k)) >= 1
            ca, cb = a.counters(), b.counters()
            assert ca["errors"] == cb["errors"] == 0 and cb["hits"] == len(ks), (ca, cb)
            # Healthy, on the default timeout: nothing timed out (publish()
            # put nothing twice) and no breaker opened.
            assert ca["timeouts"] == cb["timeouts"] == 0, (ca, cb)
            assert ca["writes"] == len(ks) and ca["breaker_opens"] == cb["breaker_opens"] == 0, \
                (ca, cb)
            assert ca["map_refreshes"] >= 1 and cb["map_refreshes"] >= 1, (ca, cb)
        finally:
            a.close()
            b.close()


def test_cluster_master_killed_replica_promoted_serving_goes_on():
    with _setup() as c, tempfile.TemporaryDirectory() as t:
        a = Drive(c.url, t)
        b = Drive(c.url, t)
        try:
            ks = keys(60, seed=2)
            publish(a, ks)
            owners = by_owner(c, ks)
            victim = c.by_port(max(owners, key=lambda p: len(owners[p])))
            lost, kept = owners[victim.port], [k for k in ks if k not in owners[victim.port]]
            for k in ks:
                assert get(b, k, value(k)) == "hit"
            before = b.counters()
            result: List = []
            killer = threading.Thread(target=lambda: result.append(c.kill_master(victim)))
            killer.start()
            answers: Dict[str, int] = {"hit": 0, "miss": 0}
            # While the replica takes over (the cluster's node timeout,
            # 1 s, then an election): the other shards hit, the lost one's
            # keys are exact or misses, every answer comes. Asked once the
            # master is dead, and before its replica serves: the lost
            # shard's gets are misses then.
            while victim.proc.poll() is None and killer.is_alive():
                time.sleep(0.01)
            during = b.counters()
            while killer.is_alive():
                for k in lost[:5]:
                    answers[get(b, k, value(k))] += 1
                for k in kept[:10]:
                    assert get(b, k, value(k)) == "hit", ("a live shard's key missed", k)
            killer.join()
            assert result, "the replica was not promoted"
            outage = b.counters()
            print("     during the failover: %s" % answers)
            assert answers["miss"] > 0, ("no lost-shard get missed during the outage", answers)
            assert outage["misses"] + outage["errors"] + outage["timeouts"] > \
                during["misses"] + during["errors"] + during["timeouts"], (during, outage)
            promoted = result[0]
            # After the map is read again, hits resume from the new master.
            eventually_all_hit(b, ks, "after the failover")
            after = b.counters()
            assert after["map_refreshes"] > before["map_refreshes"], (before, after)
            # The dead master's breaker no longer counts: it serves no slot.
            assert after["breaker_open"] == 0, after
            assert promoted.command("EXISTS", PREFIX + lost[0]) == 1
            # And writes to the promoted shard go on.
            new = [k for k in keys(40, seed=3)
                   if by_owner(c, [k]).get(promoted.port)][:5]
            assert new
            publish(a, new)
            for k in new:
                assert get(b, k, value(k)) == "hit"
        finally:
            a.close()
            b.close()


def test_cluster_slot_migrated_during_load_moved_and_ask_followed():
    """A hash tag in the prefix puts every key in one slot; that slot moves
    to another master while both drives read and write it."""
    prefix = "ptxcache:{m1}:"
    with _setup() as c, tempfile.TemporaryDirectory() as t:
        a = Drive(c.url, t, "--prefix", prefix)
        b = Drive(c.url, t, "--prefix", prefix)
        try:
            slot = slot_of(prefix + "0" * 64)
            assert slot == c.keyslot(prefix + "0" * 64) == c.keyslot("m1")
            ks = keys(40, seed=4)
            publish(a, ks)
            src = c.owner(slot)
            assert src.dbsize() == len(ks)
            dest = next(m for m in c.masters() if m is not src)
            written: List[str] = list(ks)
            redirects_during: Dict[str, int] = {}
            fresh = iter(keys(100, seed=5))

            def load(step: str):
                r0 = b.counters()["redirects"]
                for k in written:
                    assert get(b, k, value(k)) == "hit", (step, k)
                more = [next(fresh) for _ in range(3)]
                publish(a, more)                 # new keys: ASK to the importer
                written.extend(more)
                for k in more:
                    assert get(b, k, value(k)) == "hit", (step, k)
                redirects_during[step] = b.counters()["redirects"] - r0

            c.migrate_slot(slot, dest, between=load)
            # Moved: the old owner answers MOVED, the map learns, hits go on.
            m0 = b.counters()
            for k in written:
                assert get(b, k, value(k)) == "hit", k
            m1 = b.counters()
            assert dest.dbsize() == len(written) and src.dbsize() == 0
            assert src.command("CLUSTER", "COUNTKEYSINSLOT", slot) == 0
            # ASKs while half the keys had moved (no MOVED can come before
            # the slot is reassigned), a MOVED after, then the map's route.
            assert redirects_during["half moved"] > 0, redirects_during
            assert redirects_during["all moved"] >= len(ks), redirects_during
            assert m1["redirects"] > m0["redirects"], (m0, m1)
            assert m1["map_refreshes"] > m0["map_refreshes"], (m0, m1)
            m2 = b.counters()
            for k in written:
                assert get(b, k, value(k)) == "hit"
            assert b.counters()["redirects"] == m2["redirects"], "the map did not learn"
            assert m1["errors"] == 0 and a.counters()["errors"] == 0, (m1, a.counters())
        finally:
            a.close()
            b.close()


def test_cluster_one_shard_frozen_the_others_serve():
    # A long node timeout: the frozen master is not failed over, it is
    # only silent (SIGSTOP), then back (SIGCONT).
    with _setup(node_timeout_ms=60000) as c, tempfile.TemporaryDirectory() as t:
        a = Drive(c.url, t)
        b = Drive(c.url, t)
        try:
            ks = keys(60, seed=6)
            publish(a, ks)
            owners = by_owner(c, ks)
            frozen = c.masters()[0]
            stuck, live = owners[frozen.port], [k for k in ks if k not in owners[frozen.port]]
            for k in ks:
                assert get(b, k, value(k)) == "hit"
            c0 = b.counters()
            c.freeze(frozen)
            try:
                for _ in range(3):
                    for k in stuck[:4]:
                        assert get(b, k, value(k)) == "miss"
                    for k in live:
                        assert get(b, k, value(k)) == "hit", ("a live shard's key missed", k)
                c1 = b.counters()
            finally:
                c.thaw(frozen)
            # The silent shard timed out and its breaker opened; the other
            # shards' keys hit all along (a breaker per node).
            assert c1["timeouts"] > c0["timeouts"], (c0, c1)
            assert c1["breaker_opens"] > c0["breaker_opens"], (c0, c1)
            assert c1["hits"] - c0["hits"] == 3 * len(live), (c0, c1)
            eventually_all_hit(b, stuck, "after the shard woke")
        finally:
            a.close()
            b.close()


def test_cluster_full_evicting_and_refusing():
    with _setup() as c, tempfile.TemporaryDirectory() as t:
        a, b = Drive(c.url, t), Drive(c.url, t)
        try:
            used = max(int(m.info("memory")["used_memory"]) for m in c.masters())
            c.set_maxmemory(used + (3 << 20))
            ks = keys(150, seed=7)             # about 15 MB over 9 MB of room
            publish(a, ks)
            seen = {"hit": 0, "miss": 0}
            for k in ks:
                seen[get(b, k, value(k))] += 1
            assert seen["hit"] > 0 and seen["miss"] > 0, seen
            # Full and refusing writes (noeviction): errors, but Redis
            # answering OOM does not open the breaker; reads still hit.
            for m in c.masters():
                m.command("CONFIG", "SET", "maxmemory-policy", "noeviction")
                m.command("CONFIG", "SET", "maxmemory", 1)
            e0 = a.counters()
            for k in keys(10, seed=8):
                a.put(k, value(k))
            a.wait(lambda x: x["errors"] >= e0["errors"] + 10, "OOM errors")
            e1 = a.counters()
            assert e1["breaker_open"] == 0 and e1["breaker_opens"] == e0["breaker_opens"], e1
            hit = [k for k in ks if get(b, k, value(k)) == "hit"]
            assert hit and get(a, hit[0], value(hit[0])) == "hit"
        finally:
            a.close()
            b.close()


def test_cluster_gone_and_back_misses_during_hits_after():
    with _setup() as c, tempfile.TemporaryDirectory() as t:
        a = Drive(c.url, t)
        b = Drive(c.url, t)
        try:
            ks = keys(30, seed=9)
            publish(a, ks)
            for k in ks:
                assert get(b, k, value(k)) == "hit"
            c.stop_all()
            for k in ks:
                assert get(b, k, value(k)) == "miss"
            # The writer's puts while it is gone: each ends, as an error
            # (no connection) or a timeout, none as a write, none hangs.
            ca = a.counters()
            for k in ks[:5]:
                a.put(k, value(k))
            ended = lambda x: x["errors"] + x["timeouts"] - ca["errors"] - ca["timeouts"]
            ca1 = a.wait(lambda x: ended(x) >= 5, "the puts' ends while the cluster is gone")
            assert ca1["writes"] == ca["writes"] and ended(ca1) == 5, (ca, ca1)
            cb = b.counters()
            assert cb["errors"] + cb["timeouts"] >= 5 and cb["breaker_opens"] >= 1, cb
            c.start_all()                      # empty: no persistence
            # Each node's breaker probes on its own: publish again what
            # does not hit yet, until every key does (bounded).
            deadline = time.time() + 90
            left = list(ks)
            while left:
                for k in left:
                    a.put(k, value(k))
                a.cmd("sleep 300")
                left = [k for k in left if get(b, k, value(k)) != "hit"]
                assert time.time() < deadline, "%d keys never hit again; %s %s" % (
                    len(left), a.counters(), b.counters())
        finally:
            a.close()
            b.close()


SECRET = b"cluster secret for the tests\n"


def test_cluster_two_daemons_share_kernels():
    """Real daemons, l2 = redis-cluster://: the second compiles nothing."""
    kernels = triton_kernels()[:4]
    with _setup() as c, tempfile.TemporaryDirectory() as t:
        secret = os.path.join(t, "secret")
        with open(secret, "wb") as f:
            f.write(SECRET)

        def node():
            return Daemon(extra=["--l2", c.seed_url(c.nodes[0], c.nodes[4]),
                                 "--l2-secret-file", secret])
        with node() as a:
            first = [a.cli("llc", *TRITON_FLAGS, k, "-o", "-").stdout for k in kernels]
            # Each at once for its user, and for everyone once confirmed:
            # each write ends (a timeout too would end it: none must come
            # on a healthy cluster on the default timeout, see publish()).
            n = 2 * len(kernels)
            s = a.wait_stats(lambda s: s["l2_writes"] + s["l2_errors"] + s["l2_timeouts"] >= n,
                             "writes to the cluster")
            assert s["l2_writes"] == n and s["l2_errors"] == s["l2_timeouts"] == 0, s
            assert a.stats()["l2_map_refreshes"] >= 1
        with node() as b:
            second = [b.cli("llc", *TRITON_FLAGS, k, "-o", "-").stdout for k in kernels]
            s = b.stats()
            assert s["compiles"] == 0 and s["l2_hits"] == len(kernels), s
            assert "l2_redirects" in s and s["l2_map_refreshes"] >= 1, s
        assert first == second == [llc(TRITON_FLAGS + [k, "-o", "-"]).stdout for k in kernels]
        assert sum(m.dbsize() for m in c.masters()) >= len(kernels)
