#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Artifact puts (daemon/put_batch.c's group commit; the store's
checkpoints, store.c): N client processes at once, each on its own
connection, each putting COUNT values of SIZE bytes one after another (a
put, its reply, the next), as a JIT's cache writes do, while one more
client gets a 1 KiB value every millisecond. Reported per run: puts a
second, the median and 99th percentile of one put, and the prober's
longest get (what every other client of the daemon waits for at worst
while the puts run), on a private daemon of the given build (or --daemon,
e.g. an older build's, to compare). The defaults: 1 and 8 clients of 1
KiB values, then 1 client of 25 KB ones (a Triton kernel's entry).

usage: bench/puts.py [--build build] [--daemon PATH] [--count 5000]
                     [--runs 1x1024 8x1024 1x25000]
"""
import argparse
import multiprocessing
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests"))

PUT, GET = 11, 10


def request(raw, t, fields):
    from harness import frame, mp_pack, mp_unpack
    raw.send(frame(t, mp_pack(fields)))
    while True:
        ftype, body = raw.recv_frame(progress=True)
        if ftype != 0xfe:
            break
    assert ftype == t | 0x80, mp_unpack(body)


def client(path, n, count, size, go, out):
    from harness import Raw
    raw = Raw(path, timeout=60)
    value = os.urandom(size)
    times = []
    go.wait()
    t0 = time.monotonic()
    for i in range(count):
        t = time.monotonic()
        request(raw, PUT, {"id": i + 1, "ns": "bench", "key": "c%d-%d" % (n, i), "value": value})
        times.append(time.monotonic() - t)
    out.put((time.monotonic() - t0, times))
    raw.close()


def prober(path, stop, out):
    """A get of a 1 KiB value every millisecond until stop: the longest."""
    from harness import Raw
    raw = Raw(path, timeout=60)
    request(raw, PUT, {"id": 1, "ns": "probe", "key": "k", "value": b"p" * 1024})
    longest, i = 0.0, 1
    while not stop.is_set():
        i += 1
        t = time.monotonic()
        request(raw, GET, {"id": i, "ns": "probe", "key": "k"})
        longest = max(longest, time.monotonic() - t)
        time.sleep(0.001)
    out.put(longest)
    raw.close()


def run(path, clients, count, size):
    go, stop = multiprocessing.Event(), multiprocessing.Event()
    out, probe = multiprocessing.Queue(), multiprocessing.Queue()
    procs = [multiprocessing.Process(target=client, args=(path, n, count, size, go, out))
             for n in range(clients)]
    procs.append(multiprocessing.Process(target=prober, args=(path, stop, probe)))
    for p in procs:
        p.start()
    time.sleep(0.5)
    t0 = time.monotonic()
    go.set()
    times = []
    for _ in range(clients):
        times += out.get()[1]
    wall = time.monotonic() - t0
    stop.set()
    longest = probe.get()
    for p in procs:
        p.join()
    times.sort()
    return (clients * count / wall, times[len(times) // 2] * 1e3,
            times[int(len(times) * 0.99)] * 1e3, longest * 1e3)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build")
    ap.add_argument("--daemon")
    ap.add_argument("--count", type=int, default=5000)
    ap.add_argument("--runs", nargs="+", default=["1x1024", "8x1024", "1x25000"],
                    help="CLIENTSxSIZE each")
    ap.add_argument("--extra", nargs="*", default=[])
    a = ap.parse_args()
    os.environ.setdefault("PTXCACHE_BUILD", a.build)
    import harness
    binary = a.daemon or harness.DAEMON
    print("artifact puts (bench/puts.py), %d a client:" % a.count)
    for spec in a.runs:
        n, size = (int(x) for x in spec.split("x"))
        with harness.Daemon(workers=1, binary=binary, extra=a.extra) as d:
            rate, med, p99, longest = run(d.socket, n, a.count, size)
        print("  %d client%s, %d bytes: %.0f puts/s; a put %.2f ms median, %.2f ms p99; "
              "another client's longest 1 KiB get %.1f ms"
              % (n, "" if n == 1 else "s", size, rate, med, p99, longest))


if __name__ == "__main__":
    main()
