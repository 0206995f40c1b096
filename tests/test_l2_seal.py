# SPDX-License-Identifier: Apache-2.0
"""What Redis learns of the tier's values, and what a writer without the
secret can do with them (daemon/l2.c's seal: AES-256-GCM under a key per
scope and value, bound to the key's name and a chunk's position), through
build/l2drive against a real redis-server and a real Redis Cluster:
  - a marker inside a 40 KB value (stored whole) and a 3 MB one (chunks and
    a manifest) put through the tier, under the default space and a
    scope's, is found in no key and no value of any node (every key
    scanned, each read whole), while another node gets both exact;
  - a value moved to another key, to the same key of another scope, or
    with its chunks to another scope, is a reject (counted in
    l2_rejects), never a hit; so is one truncated or with a byte altered.
Chunks swapped within a value or taken from another, manifests of other
keys, and the earlier format being a miss: tests/test_l2_chunks.py,
test_l2_live.py."""
import os
import tempfile

from redis_fixture import RedisServer
from test_l2_live import KEY, KEY2, Drive

MB = 1 << 20
SPACES = ("-", "artifact:u1000:")


def _valued(marker, size):
    """size random bytes with marker at the start, across the first chunk
    boundary (1 MiB - 16 into the record), in the middle and at the end."""
    data = bytearray(os.urandom(size))
    for at in (0, min(size // 2, (1 << 20) - 40), size // 3, size - len(marker)):
        data[at:at + len(marker)] = marker
    return bytes(data)


def _put(a, space, key, data):
    assert a.cmd("space " + space).startswith("space")
    before = a.counters()["writes"]
    a.put(key, data)
    a.wait(lambda c: c["writes"] == before + 1, "the write", tries=3000)


def _get(b, tmp, space, key, data):
    assert b.cmd("space " + space).startswith("space")
    out = os.path.join(tmp, "got")
    assert b.get(key, out) == ("hit", False)
    with open(out, "rb") as f:
        assert f.read() == data


def _put_and_get(a, b, tmp, space, key, data):
    _put(a, space, key, data)
    _get(b, tmp, space, key, data)


def _scan_all(servers):
    """Every key (name, value) on every server: SCAN, then GET each."""
    seen = []
    for s in servers:
        cursor = b"0"
        while True:
            cursor, names = s.command("SCAN", cursor, "COUNT", "1000")
            for n in names:
                seen.append((n if isinstance(n, bytes) else n.encode(), s.command("GET", n)))
            if cursor in (b"0", "0", 0):
                break
    return seen


def _marker_nowhere(url, tmp, servers):
    marker = b"MARKER-" + os.urandom(12).hex().encode() + b"-END"
    a, b = Drive(url, tmp), Drive(url, tmp)
    try:
        values = []
        keys = iter([KEY, KEY2, "11" * 32, "22" * 32])
        for space in SPACES:
            for size in (40 * 1000, 3 * MB):
                values.append((space, next(keys), _valued(marker, size)))
                _put(a, *values[-1])
        seen = _scan_all(servers)
        # Two values stored whole, two manifests, 2 x 4 chunks (and no
        # lease left that would hold anything but a node's name).
        stored = [(n, v) for n, v in seen if not n.endswith(b":lease")]
        assert len(stored) >= 12, [n for n, _ in seen]
        assert sum(len(v) for _, v in stored) > 2 * 3 * MB
        for n, v in seen:
            assert marker not in n, n
            assert v is None or marker not in v, "the marker in plain sight under %r" % n
            # Nor any 16 bytes of it: the value is not merely shifted or cut.
            for k in range(0, len(marker) - 16, 4):
                assert v is None or marker[k:k + 16] not in v, (n, k)
        # And another node reads each back exact.
        for space, key, data in values:
            _get(b, tmp, space, key, data)
        c = b.counters()
        assert (c["hits"], c["rejects"], c["errors"]) == (4, 0, 0), c
    finally:
        a.close()
        b.close()


def test_l2_marker_in_values_is_nowhere_in_redis():
    with RedisServer() as r:
        _marker_nowhere(r.url, r.tmp, [r])


def test_l2_marker_in_values_is_nowhere_in_a_redis_cluster():
    from redis_fixture import RedisCluster
    with RedisCluster() as c, tempfile.TemporaryDirectory() as t:
        c_nodes = c.alive()
        # Replicas too: they hold what their masters do.
        for n in c_nodes:
            if n.role() != "master":
                n.command("READONLY")
        _marker_nowhere(c.url, t, c_nodes)


def _rename(r, frm, to):
    """Copy frm's bytes under to (what a writer without the secret can do)."""
    r.set(to, r.get(frm))


def test_l2_values_moved_to_another_key_or_scope_are_rejects():
    with RedisServer() as r:
        a, b = Drive(r.url, r.tmp), Drive(r.url, r.tmp)
        try:
            small, large = os.urandom(40 * 1000), os.urandom(3 * MB)
            _put_and_get(a, b, r.tmp, "artifact:u1000:", KEY, small)
            _put_and_get(a, b, r.tmp, "artifact:u1000:", KEY2, large)
            own, other = "ptxcache:artifact:u1000:", "ptxcache:artifact:u1001:"
            large_names = [n for n in r.keys(own + KEY2 + ":*")]
            assert len(large_names) == 4, large_names
            key3 = "33" * 32

            def moved_large(to_space, to_key):
                _rename(r, own + KEY2, to_space + to_key)
                for n in large_names:
                    _rename(r, n, n.replace(own + KEY2, to_space + to_key))

            cases = [
                # (what, where it now is: space, key)
                ("a whole value to another key of its scope",
                 lambda: _rename(r, own + KEY, own + key3), "artifact:u1000:", key3),
                ("a whole value to its key in another scope",
                 lambda: _rename(r, own + KEY, other + KEY), "artifact:u1001:", KEY),
                ("a whole value to its key in no space",
                 lambda: _rename(r, own + KEY, "ptxcache:" + KEY), "-", KEY),
                ("a chunked value, chunks and all, to another key of its scope",
                 lambda: moved_large(own, key3), "artifact:u1000:", key3),
                ("a chunked value, chunks and all, to its key in another scope",
                 lambda: moved_large(other, KEY2), "artifact:u1001:", KEY2),
            ]
            for what, move, space, key in cases:
                move()
                assert b.cmd("space " + space).startswith("space")
                before = b.counters()
                assert b.get(key) == ("miss", False), what
                after = b.counters()
                assert after["rejects"] == before["rejects"] + 1, (what, before, after)
                assert after["hits"] == before["hits"] and after["errors"] == 0, what
                for n in r.keys("*"):
                    if not n.startswith(own):
                        r.delete(n)
            # A whole value cut short, or with one byte altered, in place.
            good = r.get(own + KEY)
            altered = bytearray(good)
            altered[len(good) // 2] ^= 0x20
            assert b.cmd("space artifact:u1000:").startswith("space")
            for what, value in (("cut short", good[:-100]), ("a byte altered", bytes(altered))):
                r.set(own + KEY, value)
                before = b.counters()
                assert b.get(KEY) == ("miss", False), what
                assert b.counters()["rejects"] == before["rejects"] + 1, what
            # Where they were, untouched, they still open.
            r.set(own + KEY, good)
            assert b.get(KEY) == ("hit", False) and b.get(KEY2) == ("hit", False)
        finally:
            a.close()
            b.close()
