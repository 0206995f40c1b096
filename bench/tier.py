#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""The shared tier with large values (make bench): daemon/l2*.c alone
(tests/tools/l2drive: one process a node) against one real redis-server.

Measures, on the daemon's default timeout:
  - a small lookup's latency from node B, with the tier idle: the floor;
  - the same while node A publishes 100 MB values back to back, and while
    node C reads one: p50, p99 and max, and p99 over the floor's p99;
  - a 100 MB value's publish and read, in MB/s, against one plain SET and
    one GET of the same bytes in a single command from Python (the floor
    of moving them through this Redis at all).
Writes build/bench/tier.json and prints a table.

usage: bench/tier.py [--build build] [--out build/bench] [--n 2000]
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
SMALL = "5a" * 32
BIG = "c3" * 32


def lat(d, n):
    out = d.cmd("lat %s %d" % (SMALL, n), timeout=600).split()
    f = dict(kv.split("=") for kv in out[1:])
    assert int(f["hits"]) == n, out
    return {k: float(f[k]) for k in ("p50_us", "p99_us", "max_us")}


def raw_floor(path, value):
    """One SET and one GET of value in single commands: seconds each."""
    s = socket.socket(socket.AF_UNIX)
    s.connect(path)

    def call(*args):
        s.sendall(b"".join([b"*%d\r\n" % len(args)] +
                           [b"$%d\r\n%s\r\n" % (len(a), a) for a in args]))
        buf = bytearray()
        while b"\r\n" not in buf:
            buf += s.recv(65536)
        head = bytes(buf[:buf.index(b"\r\n")])
        if head.startswith(b"$"):
            want = len(head) + 2 + int(head[1:]) + 2
            while len(buf) < want:
                buf += s.recv(1 << 22)
        return head

    t0 = time.perf_counter()
    call(b"SET", b"floor", value)
    t1 = time.perf_counter()
    call(b"GET", b"floor")
    t2 = time.perf_counter()
    call(b"DEL", b"floor")
    s.close()
    return t1 - t0, t2 - t1


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=os.environ.get("PTXCACHE_BUILD", "build"))
    ap.add_argument("--out", default=None)
    ap.add_argument("--n", type=int, default=2000)
    args = ap.parse_args()
    os.environ["PTXCACHE_BUILD"] = os.path.abspath(args.build)
    from redis_fixture import RedisServer
    from test_l2_live import Drive
    from harness import Skip

    out_dir = args.out or os.path.join(args.build, "bench")
    os.makedirs(out_dir, exist_ok=True)
    try:
        r = RedisServer()
    except Skip as e:
        print("tier: skipped (%s)" % e)
        return 0
    res = {}
    with r:
        tmp = tempfile.mkdtemp(dir=r.tmp)
        a, b, c = (Drive(r.url, tmp, "--timeout", "50") for _ in range(3))
        try:
            a.put(SMALL, os.urandom(4096))
            a.wait(lambda k: k["writes"] == 1, "the small write")
            res["idle"] = lat(b, args.n)

            value = os.urandom(100 * MB)
            t0 = time.perf_counter()
            a.put(BIG, value)
            a.wait(lambda k: k["writes"] == 2, "the 100 MB write", tries=100000, ms=1)
            res["put_100mb_s"] = time.perf_counter() - t0
            t0 = time.perf_counter()
            word, _ = c.get(BIG, os.path.join(tmp, "big"))
            res["get_100mb_s"] = time.perf_counter() - t0
            assert word == "hit"
            res["floor_set_s"], res["floor_get_s"] = raw_floor(r.socket, value)

            # Node A publishes 100 MB values back to back meanwhile.
            for i in range(3):
                a.put(BIG, value)
            res["while_publishing"] = lat(b, args.n)
            a.wait(lambda k: k["writes"] == 5, "the writes", tries=100000, ms=1)
            # Node C reads one meanwhile (its loop runs while B measures).
            c.proc.stdin.write(("get %s\n" % BIG).encode())
            c.proc.stdin.flush()
            res["while_reading"] = lat(b, args.n)
            c.cmd("counters")   # the get's answer line, then this one
            for d in (a, b, c):
                k = d.counters()
                assert (k["timeouts"], k["errors"], k["breaker_opens"]) == (0, 0, 0), k
        finally:
            for d in (a, b, c):
                d.close()
    for k in ("while_publishing", "while_reading"):
        res[k]["p99_over_idle"] = res[k]["p99_us"] / res["idle"]["p99_us"]
    res["put_mb_s"] = 100 / res["put_100mb_s"]
    res["get_mb_s"] = 100 / res["get_100mb_s"]
    res["put_over_floor"] = res["put_100mb_s"] / res["floor_set_s"]
    res["get_over_floor"] = res["get_100mb_s"] / res["floor_get_s"]
    with open(os.path.join(out_dir, "tier.json"), "w") as f:
        json.dump(res, f, indent=1)
    print("tier: small lookups from another node (%d each), us" % args.n)
    for k in ("idle", "while_publishing", "while_reading"):
        v = res[k]
        print("  %-17s p50 %6.0f  p99 %6.0f  max %7.0f%s" % (
            k, v["p50_us"], v["p99_us"], v["max_us"],
            "  p99 %.2fx idle" % v["p99_over_idle"] if k != "idle" else ""))
    print("tier: 100 MB publish %.2f s (%.0f MB/s, %.2fx one plain SET), read %.2f s "
          "(%.0f MB/s, %.2fx one plain GET)" % (
              res["put_100mb_s"], res["put_mb_s"], res["put_over_floor"],
              res["get_100mb_s"], res["get_mb_s"], res["get_over_floor"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
