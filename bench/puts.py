#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Artifact puts a second (daemon/put_batch.c's group commit): N client
processes at once, each on its own connection, each putting COUNT values
of SIZE bytes one after another (a put, its reply, the next), as a JIT's
cache writes do. Reported: puts a second for 1 client and for 8, on a
private daemon of the given build (or --daemon, e.g. an older build's,
to compare).

usage: bench/puts.py [--build build] [--daemon PATH] [--count 5000]
                     [--size 1024] [--clients 1 8]
"""
import argparse
import multiprocessing
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests"))

PUT = 11


def client(path, n, count, size, go, out):
    from harness import Raw, frame, mp_pack, mp_unpack
    raw = Raw(path, timeout=60)
    value = os.urandom(size)
    go.wait()
    t0 = time.monotonic()
    for i in range(count):
        raw.send(frame(PUT, mp_pack({"id": i + 1, "ns": "bench", "key": "c%d-%d" % (n, i),
                                     "value": value})))
        while True:
            ftype, body = raw.recv_frame(progress=True)
            if ftype != 0xfe:
                break
        assert ftype == PUT | 0x80, mp_unpack(body)
    out.put(time.monotonic() - t0)
    raw.close()


def run(path, clients, count, size):
    go = multiprocessing.Event()
    out = multiprocessing.Queue()
    procs = [multiprocessing.Process(target=client, args=(path, n, count, size, go, out))
             for n in range(clients)]
    for p in procs:
        p.start()
    time.sleep(0.5)
    t0 = time.monotonic()
    go.set()
    for _ in procs:
        out.get()
    wall = time.monotonic() - t0
    for p in procs:
        p.join()
    return clients * count / wall


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build")
    ap.add_argument("--daemon")
    ap.add_argument("--count", type=int, default=5000)
    ap.add_argument("--size", type=int, default=1024)
    ap.add_argument("--clients", type=int, nargs="+", default=[1, 8])
    ap.add_argument("--extra", nargs="*", default=[])
    a = ap.parse_args()
    os.environ.setdefault("PTXCACHE_BUILD", a.build)
    import harness
    binary = a.daemon or harness.DAEMON
    for n in a.clients:
        with harness.Daemon(workers=1, binary=binary, extra=a.extra) as d:
            rate = run(d.socket, n, a.count, a.size)
        print("%d client%s: %.0f puts/s of %d bytes" % (n, "" if n == 1 else "s", rate, a.size))


if __name__ == "__main__":
    main()
