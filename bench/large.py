#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Large values through the shared tier (make bench): daemon/l2*.c alone
(tests/tools/l2drive: one process a node), against one real redis-server
and a real Redis Cluster (3 masters, a replica each).

For 1, 8, 64 and 256 MB values: node A publishes one; a fresh node B
(a new process, up and answering: nothing cached, no connection to Redis
yet) gets it, timed from the command to its answer; beside it, in the same run and from the same
Redis, a raw GET of the same bytes stored under one key (a Python socket
client reading into one preallocated buffer: no parsing, no copies, the
fastest client here), over the transport the tier uses (the single
Redis's Unix socket; the cluster's TCP, from the master that holds the
key). Best of --rounds for each; ratios tier/raw and MB/s.

Then the sealing alone (l2drive's "crypto"): the AEAD seal and open of a
64 MB value against one HMAC-SHA-256 over the same bytes (what an
HMAC-only seal costs, per side), in MB/s on this CPU.

Writes build/bench/large.json and prints a table.

usage: bench/large.py [--build build] [--out DIR] [--rounds 3] [--sizes 1,8,64,256]
                      [--single-only]
"""
import argparse
import json
import os
import socket
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests"))

MB = 1 << 20


def raw_get(addr, key, size):
    """Seconds for one GET of key (size bytes) over addr: a Unix socket
    path, or (host, port); the body read into one preallocated buffer."""
    s = socket.socket(socket.AF_UNIX if isinstance(addr, str) else socket.AF_INET)
    s.settimeout(120)
    s.connect(addr)
    head = b"$%d\r\n" % size
    buf = bytearray(len(head) + size + 2)
    view = memoryview(buf)
    cmd = b"*2\r\n$3\r\nGET\r\n$%d\r\n%s\r\n" % (len(key), key)
    t0 = time.perf_counter()
    s.sendall(cmd)
    got = 0
    moved = s.recv(64, socket.MSG_PEEK)
    if moved.startswith(b"-MOVED"):         # a failover since the map was read
        host, port = moved.split(b"\r\n")[0].split()[2].rsplit(b":", 1)
        s.close()
        return raw_get((host.decode(), int(port)), key, size)
    while got < len(buf):
        n = s.recv_into(view[got:])
        if not n:
            raise AssertionError("the connection closed")
        got += n
        if got >= len(head) and bytes(buf[:len(head)]) != head:
            raise AssertionError("not the value: %r" % bytes(buf[:got][:80]))
    t = time.perf_counter() - t0
    s.close()
    return t


def raw_set(addr, key, value):
    """SET key value over addr; the address it went to (a MOVED followed)."""
    s = socket.socket(socket.AF_UNIX if isinstance(addr, str) else socket.AF_INET)
    s.settimeout(120)
    s.connect(addr)
    s.sendall(b"*3\r\n$3\r\nSET\r\n$%d\r\n%s\r\n$%d\r\n" % (len(key), key, len(value)))
    s.sendall(value)
    s.sendall(b"\r\n")
    answer = s.recv(256)
    s.close()
    if answer.startswith(b"-MOVED"):
        host, port = answer.split(b"\r\n")[0].split()[2].rsplit(b":", 1)
        return raw_set((host.decode(), int(port)), key, value)
    assert answer.startswith(b"+OK"), "SET failed: %r" % answer
    return addr


def one_size(url, tmp, size, rounds, floor_addr):
    from test_l2_live import Drive
    key = ("%02x" % (size // MB % 256)) * 32
    value = os.urandom(size)
    a = Drive(url, tmp)
    try:
        before = a.counters()["writes"]
        t0 = time.perf_counter()
        a.put(key, value)
        a.wait(lambda k: k["writes"] == before + 1, "the write", tries=100000, ms=1)
        put_s = time.perf_counter() - t0
    finally:
        a.close()
    gets = []
    for _ in range(rounds):
        b = Drive(url, tmp)
        try:
            b.counters()        # the process is up, its loop turning
            t0 = time.perf_counter()
            r = b.cmd("get %s" % key, timeout=600)
            gets.append(time.perf_counter() - t0)
            assert r.startswith("hit") and "len=%d " % size in r, (r, b.counters())
            k = b.counters()
            assert (k["timeouts"], k["errors"], k["rejects"]) == (0, 0, 0), k
        finally:
            b.close()
    addr, fkey = floor_addr(value)
    floors = [raw_get(addr, fkey, size) for _ in range(rounds)]
    get_s, floor_s = min(gets), min(floors)
    print("  %4d MB  tier %8.1f ms   raw GET %8.1f ms   %.2fx" % (
        size // MB, get_s * 1e3, floor_s * 1e3, get_s / floor_s), flush=True)
    return {"mb": size // MB, "put_s": put_s, "get_s": get_s, "raw_get_s": floor_s,
            "get_mb_s": size / MB / get_s, "raw_mb_s": size / MB / floor_s,
            "ratio": get_s / floor_s, "gets": gets, "raw_gets": floors}


def crypto(build, mb):
    import subprocess
    out = subprocess.run([os.path.join(build, "l2drive"), "--crypto", str(mb)],
                         capture_output=True, text=True, check=True).stdout.split()
    return {k: float(v) for k, v in (kv.split("=") for kv in out)}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=os.environ.get("PTXCACHE_BUILD", "build"))
    ap.add_argument("--out", default=None)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--sizes", default="1,8,64,256")
    ap.add_argument("--single-only", action="store_true")
    args = ap.parse_args()
    os.environ["PTXCACHE_BUILD"] = os.path.abspath(args.build)
    import redis_fixture
    from harness import Skip

    out_dir = args.out or os.path.join(args.build, "bench")
    os.makedirs(out_dir, exist_ok=True)
    sizes = [int(s) * MB for s in args.sizes.split(",")]
    res = {"single": [], "cluster": []}
    try:
        r = redis_fixture.RedisServer()
    except Skip as e:
        print("large: skipped (%s)" % e)
        return 0
    with r:
        def floor_single(value):
            raw_set(r.socket, b"floor", value)
            return r.socket, b"floor"
        tmp = tempfile.mkdtemp(dir=r.tmp)
        for size in sizes:
            res["single"].append(one_size(r.url, tmp, size, args.rounds, floor_single))
            r.flushall()
    if not args.single_only:
        try:
            c = redis_fixture.RedisCluster()
        except Exception as e:      # noqa: BLE001 - report, keep the single's
            print("large: no cluster (%s)" % e)
            c = None
        if c:
            try:
                def floor_cluster(value):
                    owner = c.owner(c.keyslot(b"floor"))
                    return raw_set(("127.0.0.1", owner.port), b"floor", value), b"floor"
                tmp = tempfile.mkdtemp(dir=c.nodes[0].tmp)
                for size in sizes:
                    # One SET of 256 MB holds a master past the cluster's
                    # node timeout: its replica may take over meanwhile.
                    try:
                        res["cluster"].append(one_size(c.url, tmp, size, args.rounds,
                                                       floor_cluster))
                    except (AssertionError, OSError) as e:
                        print("  %4d MB  not measured: %s" % (size // MB, e))
                    c.wait_ok()
                    for m in c.masters():
                        m.flushall()
            finally:
                c.cleanup()
    try:
        res["crypto"] = crypto(args.build, 64)
    except Exception as e:          # noqa: BLE001 - an older l2drive
        print("large: no crypto figures (%s)" % e)
    with open(os.path.join(out_dir, "large.json"), "w") as f:
        json.dump(res, f, indent=1)
    for where in ("single", "cluster"):
        if not res[where]:
            continue
        print("large: a fresh node's first get, %s Redis (best of %d)" % (where, args.rounds))
        for x in res[where]:
            print("  %4d MB  tier %8.1f ms %6.0f MB/s   raw GET %8.1f ms %6.0f MB/s   %.2fx"
                  "   (put %.0f ms)" % (x["mb"], x["get_s"] * 1e3, x["get_mb_s"],
                                        x["raw_get_s"] * 1e3, x["raw_mb_s"], x["ratio"],
                                        x["put_s"] * 1e3))
    if "crypto" in res:
        k = res["crypto"]
        print("large: sealing 64 MB on this CPU: AEAD seal %.0f MB/s, open %.0f MB/s; "
              "HMAC-SHA-256 %.0f MB/s" % (k["seal_mb_s"], k["open_mb_s"], k["hmac_mb_s"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
