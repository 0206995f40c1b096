# SPDX-License-Identifier: Apache-2.0
"""Values of any size through the shared tier (daemon/l2.c), on its default
timeout (50 ms) and against a real redis-server: a sealed value over 1 MiB
goes as 1 MiB chunks, each sealed on its own (AES-256-GCM), and a sealed
manifest written last. Checked here: 1 to 100 MB values cross exact with
no timeout and no breaker opening, over a Unix socket and TCP; the layout
in Redis is the documented one (opened and rebuilt from it in Python); a
tampered, missing, swapped or foreign chunk or manifest is a miss, never
an answer, past the first window and changed during the fetch too; a
reader keeps at most a window of 4 chunks in flight; a manifest cannot make a reader fetch more than
l2-max-value; a writer killed between chunks leaves the key's earlier value
(or nothing) readable, never a mix. Two daemons carrying 1-100 MB
artifacts on their defaults: tests/test_artifact.py."""
import os
import signal
import struct
import tempfile
import time

from redis_fixture import Gate, RedisServer
from test_l2_live import KEY, KEY2, Drive, manifest, open_chunk, record, seal

MB = 1 << 20
CHUNK = (1 << 20) - 16                   # a record's bytes in a chunk
DEFAULTS = ()                            # the daemon's l2-timeout-ms: 50 ms


def fields(m):
    """A manifest's id, chunk_len, total and n_chunks."""
    return (m[5:21],) + struct.unpack(">IQI", m[21:37])


def _chunks(r, key_hex):
    """The chunk names under key_hex in Redis, in order."""
    names = [k for k in r.keys() if k.startswith("ptxcache:%s:" % key_hex)]
    return sorted(names, key=lambda k: int(k.rsplit(":", 1)[1]))


def _written(d, n=1):
    before = d.counters()["writes"]
    return lambda c: c["writes"] >= before + n


def _got(d, key, tmp):
    out = os.path.join(tmp, "got")
    if os.path.exists(out):
        os.unlink(out)
    word, _ = d.get(key, out)
    if word != "hit":
        return None
    with open(out, "rb") as f:
        return f.read()


def _cross(url, tmp, sizes):
    a, b = Drive(url, tmp, *DEFAULTS), Drive(url, tmp, *DEFAULTS)
    try:
        for i, size in enumerate(sizes):
            key = ("%02x" % (i + 1)) * 32
            data = os.urandom(size)
            done = _written(a)
            a.put(key, data)
            a.wait(done, "the %d MB write" % (size // MB), tries=3000)
            assert _got(b, key, tmp) == data, "%d MB value not exact" % (size // MB)
        # A healthy Redis on the default timeout: no timeout at all. The
        # silence detector does not count this process's own delays (its
        # timer late, bytes unread: daemon/l2.c), so the 50 ms default
        # must hold on a loaded machine too.
        for d in (a, b):
            c = d.counters()
            assert (c["timeouts"], c["errors"], c["breaker_opens"], c["rejects"]) == (0, 0, 0, 0), c
        assert b.counters()["hits"] == len(sizes)
        assert b.counters()["bytes_read"] >= sum(sizes)
        assert a.counters()["bytes_written"] >= sum(sizes)
    finally:
        a.close()
        b.close()


def test_l2_values_of_1_to_100_mb_cross_on_the_default_timeout():
    with RedisServer() as r:
        _cross(r.url, r.tmp, [1 * MB, 8 * MB, 40 * MB, 100 * MB])


def test_l2_large_values_cross_over_tcp():
    with RedisServer(tcp=True) as r:
        _cross(r.tcp_url(), r.tmp, [8 * MB, 40 * MB])


def test_l2_chunked_layout_is_the_documented_one():
    with RedisServer() as r:
        d = Drive(r.url, r.tmp, *DEFAULTS)
        try:
            data = os.urandom(2 * MB + 12345)
            done = _written(d)
            d.put(KEY, data)
            d.wait(done, "the write")
            name = "ptxcache:" + KEY
            m = r.get(name)
            vid, chunk_len, total, n = fields(m)
            rec = record(data)
            assert (len(m), chunk_len, total, n) == (53, CHUNK, len(rec), 3), (len(m), fields(m))
            assert m == manifest(name, vid, total, n)
            names = _chunks(r, KEY)
            assert names == ["ptxcache:%s:%s:%d" % (KEY, vid.hex(), i) for i in range(3)], names
            stored = [r.get(x) for x in names]
            assert [len(x) for x in stored] == [1 << 20, 1 << 20, total - 2 * CHUNK + 16]
            assert b"".join(open_chunk(name, vid, i, n, x) for i, x in enumerate(stored)) == rec
            # Nothing of the value readable in any chunk.
            assert not any(data[k:k + 32] in x for x in stored for k in (0, MB, 2 * MB))
            # A value of up to 1 MiB sealed is still one key, as before.
            done = _written(d)
            d.put(KEY2, b"x" * 1000)
            d.wait(done, "the small write")
            assert _chunks(r, KEY2) == [] and len(r.get("ptxcache:" + KEY2)) == len(seal(KEY2, b"x" * 1000))
        finally:
            d.close()


def test_l2_tampered_missing_or_foreign_chunks_and_manifests_are_misses():
    with RedisServer() as r:
        a, b = Drive(r.url, r.tmp, *DEFAULTS), Drive(r.url, r.tmp, *DEFAULTS)
        try:
            data = os.urandom(3 * MB)
            for key in (KEY, KEY2):
                done = _written(a)
                a.put(key, data)
                a.wait(done, "the write")
            names = _chunks(r, KEY)
            assert len(names) == 4
            good_chunk, good_manifest = r.get(names[1]), r.get("ptxcache:" + KEY)
            assert _got(b, KEY, r.tmp) == data

            def restore():
                r.set(names[1], good_chunk)
                r.set("ptxcache:" + KEY, good_manifest)

            flipped = bytearray(good_chunk)
            flipped[777] ^= 1
            m_total = bytearray(good_manifest)
            m_total[28] ^= 1                        # total length
            vid, _, total, _ = fields(good_manifest)
            name = "ptxcache:" + KEY
            other = _chunks(r, KEY2)
            cases = [
                ("a chunk with a flipped byte", lambda: r.set(names[1], bytes(flipped)), "rejects"),
                ("a chunk one byte short", lambda: r.set(names[1], good_chunk[:-1]), "rejects"),
                ("a chunk one byte long", lambda: r.set(names[1], good_chunk + b"x"), "rejects"),
                ("a chunk gone", lambda: r.command("DEL", names[1]), "misses"),
                ("a chunk swapped with another of the value",
                 lambda: r.set(names[1], r.get(names[2])), "rejects"),
                ("the same chunk of another value (the same bytes, another key)",
                 lambda: r.set(names[1], r.get(other[1])), "rejects"),
                ("a manifest's total changed", lambda: r.set(name, bytes(m_total)), "rejects"),
                ("another key's manifest", lambda: r.set(name, r.get("ptxcache:" + KEY2)),
                 "rejects"),
                ("a manifest cut short", lambda: r.set(name, good_manifest[:-1]), "rejects"),
                ("a manifest of version 1 (HMAC-sealed)", lambda: r.set(
                    name, b"PXLM\x01" + good_manifest[5:]), "misses"),
                # Sealed with the secret but outside a reader's bounds: a
                # chunk size it does not take, a count that does not add up.
                ("a manifest of 1-byte chunks", lambda: r.set(
                    name, manifest(name, vid, total, total, chunk_len=1)), "rejects"),
                ("a manifest with one chunk too few", lambda: r.set(
                    name, manifest(name, vid, total, 3)), "rejects"),
                ("a manifest that drops the last chunk", lambda: r.set(
                    name, manifest(name, vid, 3 * CHUNK, 3)), "rejects"),
                ("a manifest of version 3", lambda: r.set(
                    name, manifest(name, vid, total, 4, version=3)), "rejects"),
            ]
            for what, spoil, counter in cases:
                spoil()
                before = b.counters()
                assert _got(b, KEY, r.tmp) is None, what
                after = b.counters()
                assert after[counter] == before[counter] + 1, (what, before, after)
                assert after["errors"] == before["errors"], what
                restore()
                assert _got(b, KEY, r.tmp) == data, "after %s, restored" % what
        finally:
            a.close()
            b.close()


WINDOW = 4                               # chunks in flight (daemon/l2.c, L2_WINDOW_BYTES)


def _getrange_of(name):
    return lambda args: args[0].upper() == b"GETRANGE" and args[1] == name.encode()


def test_l2_a_chunk_spoiled_past_the_first_window_or_during_the_fetch_is_a_miss():
    """A value of 11 chunks, read through a gate (redis_fixture.Gate) in
    front of the real server. Its chunk 8, past the first window of 4:
    flipped or deleted before the get, then flipped or deleted in Redis
    while the get is under way (when the reader's GETRANGE for it arrives,
    the manifest and chunks 0-3 already answered): each time a miss of the
    right kind (a reject, a miss), counted once, no byte served; the same
    reader then reads the value back exact. The gate's own delays are no
    timeouts: the reader waits 2 s of silence, not 50 ms."""
    with RedisServer() as r:
        a = Drive(r.url, r.tmp, *DEFAULTS)
        spoil = {}              # the action the gate runs before chunk 8's GETRANGE
        replies = []            # the GETRANGEs answered in this get

        def before_command(args):
            act = spoil.pop(args[1], None)
            if act:
                # The fetch is under way: its manifest and first window answered.
                assert len(replies) >= 1 + WINDOW, len(replies)
                act()

        def before_reply(args):
            if args[0].upper() == b"GETRANGE":
                replies.append(args[1])

        gate = Gate(r, before_command=before_command, before_reply=before_reply)
        b = Drive(gate.url, r.tmp, "--timeout", "2000")
        try:
            data = os.urandom(10 * MB)
            done = _written(a)
            a.put(KEY, data)
            a.wait(done, "the write")
            names = _chunks(r, KEY)
            assert len(names) == 11, names
            target = names[8]
            good = r.get(target)
            flipped = bytearray(good)
            flipped[len(good) // 2] ^= 1
            cases = [
                ("flipped before the get", lambda: r.set(target, bytes(flipped)), False, "rejects"),
                ("deleted before the get", lambda: r.delete(target), False, "misses"),
                ("flipped during the fetch", lambda: r.set(target, bytes(flipped)), True, "rejects"),
                ("deleted during the fetch", lambda: r.delete(target), True, "misses"),
                ("swapped for chunk 9 during the fetch", lambda: r.set(target, r.get(names[9])),
                 True, "rejects"),
            ]
            for what, act, during, counter in cases:
                if during:
                    spoil[target.encode()] = act
                else:
                    act()
                before, asked = b.counters(), gate.seen(_getrange_of(target))
                replies.clear()
                assert _got(b, KEY, r.tmp) is None, what
                after = b.counters()
                assert not spoil, "%s: chunk 8 never asked for" % what
                assert gate.seen(_getrange_of(target)) == asked + 1, what
                assert after[counter] == before[counter] + 1, (what, before, after)
                assert sum(after[n] - before[n] for n in ("hits", "misses", "rejects", "errors",
                                                          "timeouts")) == 1, (what, before, after)
                r.set(target, good)
                assert _got(b, KEY, r.tmp) == data, "after %s, restored" % what
            assert b.counters()["hits"] == len(cases)
        finally:
            a.close()
            b.close()
            gate.close()


def test_l2_a_reader_keeps_at_most_a_window_of_chunks_in_flight():
    """A 14 MB value (15 chunks) read through a gate that answers each
    chunk only once the reader has sent every chunk its window allows
    (it opens two chunks a reply, L2_RAMP, up to 4, L2_WINDOW_BYTES of
    1 MiB chunks): the reader's chunks asked for and not yet answered reach
    4, never 5, and the value comes back exact. (Counted at the gate: a
    reply is counted answered as it leaves the gate, before the reader has
    it, so the count is never more than what the reader has in flight.)"""
    import threading
    with RedisServer() as r:
        a = Drive(r.url, r.tmp, *DEFAULTS)
        cond = threading.Condition()
        st = {"asked": 0, "answered": 0, "most": 0, "stalled": []}
        index = {}

        def before_command(args):
            if args[0].upper() == b"GETRANGE" and args[1] in index:
                with cond:
                    st["asked"] += 1
                    st["most"] = max(st["most"], st["asked"] - st["answered"])
                    cond.notify_all()

        def before_reply(args):
            if args[0].upper() == b"GETRANGE" and args[1] in index:
                j, n = index[args[1]], len(index)
                want = min(n, 2 if j == 0 else 4 if j == 1 else j + 4)
                with cond:
                    if not cond.wait_for(lambda: st["asked"] >= want, timeout=20):
                        st["stalled"].append((j, st["asked"]))
                    st["answered"] += 1

        gate = Gate(r, before_command=before_command, before_reply=before_reply)
        b = Drive(gate.url, r.tmp, "--timeout", "5000")
        try:
            data = os.urandom(14 * MB)
            done = _written(a)
            a.put(KEY, data)
            a.wait(done, "the write")
            names = _chunks(r, KEY)
            assert len(names) == 15, names
            index.update((x.encode(), i) for i, x in enumerate(names))
            assert _got(b, KEY, r.tmp) == data
            assert st["asked"] == st["answered"] == 15, st
            assert not st["stalled"], st
            assert st["most"] == WINDOW, st
        finally:
            a.close()
            b.close()
            gate.close()


def test_l2_a_manifest_cannot_make_a_reader_fetch_past_its_max_value():
    with RedisServer() as r:
        # This reader takes at most 4 MiB; the value is 6.
        a = Drive(r.url, r.tmp, *DEFAULTS)
        b = Drive(r.url, r.tmp, *DEFAULTS, "--max-value", str(4 * MB))
        try:
            done = _written(a)
            a.put(KEY, os.urandom(6 * MB))
            a.wait(done, "the write")
            calls = r.calls("getrange")
            assert _got(b, KEY, r.tmp) is None
            assert b.counters()["rejects"] == 1
            assert r.calls("getrange") == calls + 1, "fetched chunks past its bound"
            # Nor does a writer bounded so publish it: a small value put
            # after it is written, and by then Redis has served every
            # command sent before it on that one connection (answered in
            # order): a chunk of the large value would be in Redis, and
            # counted in bytes_written, by then.
            w0 = b.counters()
            b.put(KEY2, os.urandom(5 * MB))
            b.put(KEY, b"small")
            c = b.wait(lambda x: sum(x[n] - w0[n] for n in ("writes", "errors", "timeouts")) >= 1,
                       "the small write")
            assert c["writes"] == w0["writes"] + 1 and c["errors"] == c["timeouts"] == 0, c
            assert c["bytes_written"] == w0["bytes_written"] + len(seal(KEY, b"small")), \
                ("bytes of the value over its bound were written", w0, c)
            assert not _chunks(r, KEY2) and r.get("ptxcache:" + KEY2) is None, \
                "a chunk of the value over its bound was sent"
        finally:
            a.close()
            b.close()


def test_l2_a_writer_killed_between_chunks_leaves_no_mixed_value():
    with RedisServer() as r:
        a, b = Drive(r.url, r.tmp, *DEFAULTS), Drive(r.url, r.tmp, *DEFAULTS)
        try:
            old = os.urandom(3 * MB)
            done = _written(a)
            a.put(KEY, old)
            a.wait(done, "the first write")
        finally:
            a.close()
        # A second writer of the same key, and one of a new key, each
        # killed while its chunks are going out: it wrote some, not its
        # manifest (written after the last of 100 chunks).
        new = os.urandom(100 * MB)
        for key in (KEY, KEY2):
            w = Drive(r.url, r.tmp, *DEFAULTS)
            try:
                w.put(key, new)         # answered once sealed: chunks going out
                deadline = time.time() + 30
                while len(_chunks(r, key)) <= 4 and time.time() < deadline:
                    pass
                w.proc.send_signal(signal.SIGKILL)
                w.proc.wait()
                n = len(_chunks(r, key))
                assert 4 < n < 100, "%d chunks of the second write seen" % n
            finally:
                w.proc.stdout.close()
                w.proc.stderr.close()
                w.proc.stdin.close()
        try:
            assert _got(b, KEY, r.tmp) == old
            assert _got(b, KEY2, r.tmp) is None
            c = b.counters()
            assert (c["hits"], c["misses"], c["rejects"]) == (1, 1, 0), c
        finally:
            b.close()


def _cluster_chunks(c, key_hex):
    """{master port: names of key_hex's chunks it holds}."""
    out = {}
    for m in c.masters():
        names = [k.decode() if isinstance(k, bytes) else k
                 for k in m.command("KEYS", "ptxcache:%s:*" % key_hex)]
        out[m.port] = [n for n in names if not n.endswith(":lease")]
    return out


def test_l2_chunks_spread_over_a_clusters_shards_and_stay_exact_or_miss():
    """A Redis Cluster (3 masters, a replica each): a 40 MB value's chunks
    land each on the master of its own slot, so on every master; a chunk
    tampered with on its master is a reject, one gone a miss; full and
    evicting (allkeys-lru), each large value is exact or a miss, never a
    mix, and some are written and read back."""
    import random
    from redis_fixture import RedisCluster
    with RedisCluster() as c, tempfile.TemporaryDirectory() as t:
        a, b = Drive(c.url, t, *DEFAULTS), Drive(c.url, t, *DEFAULTS)
        try:
            # The chunks' names carry a random id, so their slots differ
            # each run: 41 chunks leave a master with none about once in
            # five million runs.
            data = random.Random(40).randbytes(40 * MB)
            done = _written(a)
            a.put(KEY, data)
            a.wait(done, "the 40 MB write", tries=3000)
            assert _got(b, KEY, t) == data
            name = "ptxcache:" + KEY
            vid, _, total, n = fields(c.owner(c.keyslot(name)).command("GET", name))
            assert total == len(record(data)) and n == 41, (total, n)
            slots = c.slots()
            want = {p: [] for p in (m.port for m in c.masters())}
            for i in range(n):
                chunk = "ptxcache:%s:%s:%d" % (KEY, vid.hex(), i)
                s = c.keyslot(chunk)    # the real server's slot of the name
                want[next(e[2][1] for e in slots if e[0] <= s <= e[1])].append(chunk)
            spread = _cluster_chunks(c, KEY)
            assert {p: sorted(v) for p, v in spread.items()} == \
                {p: sorted(v) for p, v in want.items()}, (spread, want)
            assert all(spread.values()), {p: len(v) for p, v in spread.items()}
            port, names = next((p, v) for p, v in spread.items() if v)
            m = c.by_port(port)
            good = m.command("GET", names[0])
            flipped = bytearray(good)
            flipped[len(flipped) // 2] ^= 1        # a whole chunk, or the short last one
            m.command("SET", names[0], bytes(flipped))
            before = b.counters()
            assert _got(b, KEY, t) is None
            assert b.counters()["rejects"] == before["rejects"] + 1
            m.command("DEL", names[0])
            before = b.counters()
            assert _got(b, KEY, t) is None
            assert b.counters()["misses"] == before["misses"] + 1
            m.command("SET", names[0], good)
            assert _got(b, KEY, t) == data
            # Full: 16 values of 8 MB into about 24 MB of room per master,
            # 72 MB in all, each read back as soon as it is written, then
            # all of them again. Emptied first: the 40 MB value's chunks,
            # evicted to make room, gave each master 13 MB more, and 8
            # values could then all fit (they did, once in CI). Redis's LRU
            # clock ticks once a second, so chunks written within one are
            # evicted in no particular order: which values stay whole at the
            # end is chance, but the first ones, read back into a cache with
            # room, are whole.
            for m in c.masters():
                m.flushall()
            used = max(int(x.info("memory")["used_memory"]) for x in c.masters())
            c.set_maxmemory(used + (24 << 20))
            values = {("%02x" % (0x80 + i)) * 32: os.urandom(8 * MB) for i in range(16)}
            c0 = a.counters()
            fresh = {"hit": 0, "miss": 0}
            for k, v in values.items():
                before = a.counters()
                a.put(k, v)
                # A publish ends once: written, refused (OOM) or, with a
                # master busy evicting, timed out; any of them leaves a miss.
                a.wait(lambda x: sum(x[n] - before[n] for n in ("writes", "errors", "timeouts"))
                       >= 1, "the publish's end", tries=3000)
                got = _got(b, k, t)
                assert got in (None, v), "%s: neither exact nor a miss" % k
                fresh["hit" if got else "miss"] += 1
            c1 = a.counters()
            print("     full: %s" % {n: c1[n] - c0[n] for n in ("writes", "errors", "timeouts")})
            seen = {"hit": 0, "miss": 0}
            for k, v in values.items():
                got = _got(b, k, t)
                assert got in (None, v), "%s: neither exact nor a miss" % k
                seen["hit" if got else "miss"] += 1
            print("     read back as written: %s; at the end: %s" % (fresh, seen))
            # Some written and read back exact, some evicted or refused
            # (the room cannot hold sixteen).
            assert c1["writes"] > c0["writes"] and fresh["hit"] > 0, (fresh, c0, c1)
            assert seen["miss"] > 0, seen
        finally:
            a.close()
            b.close()
