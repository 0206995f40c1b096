#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""A fleet on one machine (make bench): N daemons as nodes, each with its
own store and socket, on one shared tier (a Redis Cluster of 3 masters
with a replica each where redis-server can make one, else one Redis), all
on the daemon's defaults: sharing = confirm, where a compile is
published at once for its user alone (the clients are one user, as a
job's ranks are) and for everyone once confirmed in idle time.

Every node gets, at the same moment, a client per kernel (real corpus
kernels through the llc front) and a client per artifact (1, 10 and 100
MB), each artifact client acting as a JIT: get with a lease; given the
lease, "compile" for PRODUCE seconds, then put. Reported:
  - compiles per kernel and producers per artifact in the whole fleet
    (the goal: 1);
  - the fleet's wall time against one node doing the same alone;
  - bytes through the tier, and the tier's memory afterwards.
Writes build/bench/fleet.json and prints a table.

usage: bench/fleet.py [--build build] [--out DIR] [--nodes 16]
                      [--kernels 8] [--produce 3] [--single] [--late 30 10]

Then the late joiner: node b asks for a kernel 10 s into node a's 30 s
compile of it (real CPU time, the probe build's "spin"), as a job's nodes
start seconds apart: b's wall, and the CPU it did not spend.
"""
import argparse
import json
import os
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests"))

MB = 1 << 20
ARTIFACTS = [("graph-1mb", 1 * MB), ("graph-10mb", 10 * MB), ("graph-100mb", 100 * MB)]


def tier(single):
    import redis_fixture
    if not single and hasattr(redis_fixture, "RedisCluster"):
        try:
            c = redis_fixture.RedisCluster()
            return c, c.url, "Redis Cluster, 3 masters + 3 replicas", c.nodes
        except Exception as e:     # noqa: BLE001 - report and go on with one
            print("fleet: no cluster (%s); one Redis instead" % e)
    r = redis_fixture.RedisServer()
    return r, r.url, "one Redis", [r]


def used_memory(servers):
    total = 0
    for s in servers:
        try:
            info = s.command("INFO", "memory")
        except Exception:           # noqa: BLE001 - a replica, or gone
            continue
        if isinstance(info, bytes):
            info = info.decode()
        for line in info.splitlines():
            if line.startswith("used_memory:"):
                total += int(line.split(":")[1])
    return total


def run_node_clients(d, kernels, values, produce, flags, results):
    """This node's clients, all at once; their answers into results."""
    from test_artifact import Client
    threads = []

    def kernel(k):
        r = d.cli("llc", *flags, k, "-o", "-", check=False)
        results.append(("kernel", k, r.returncode, len(r.stdout)))

    def artifact(name, size):
        c = Client(d.socket, timeout=600)
        got = c.get("inductor-fx", name, lease=True, wait_ms=600000)
        if got.get("found"):
            results.append(("artifact", name, "hit", len(got["value"])))
        else:
            time.sleep(produce)                 # the JIT compiles it
            c.put("inductor-fx", name, values[name], lease=got.get("lease", 0))
            results.append(("artifact", name, "produced", size))
        c.close()

    for k in kernels:
        threads.append(threading.Thread(target=kernel, args=(k,)))
    for name, size in ARTIFACTS:
        threads.append(threading.Thread(target=artifact, args=(name, size)))
    for t in threads:
        t.start()
    return threads


def one_run(n_nodes, kernels, values, produce, single, tmp):
    from harness import TRITON_FLAGS, Daemon
    srv, url, what, servers = tier(single)
    secret = os.path.join(tmp, "secret")
    with open(secret, "wb") as f:
        f.write(b"fleet bench secret\n")
    nodes = []
    try:
        for _ in range(n_nodes):
            nodes.append(Daemon(workers=1, extra=["--l2", url, "--l2-secret-file", secret]))
        results = []
        t0 = time.time()
        threads = []
        for d in nodes:
            threads += run_node_clients(d, kernels, values, produce, TRITON_FLAGS, results)
        for t in threads:
            t.join(900)
        wall = time.time() - t0
        stats = [d.stats() for d in nodes]
        out = {
            "tier": what,
            "nodes": n_nodes,
            "wall_s": wall,
            "answers": len(results),
            "failed": [r for r in results if r[0] == "kernel" and r[2] != 0],
            "compiles": sum(s["compiles"] for s in stats),
            "confirm_compiles": sum(s["confirm_compiles"] for s in stats),
            "artifact_producers": sum(r[2] == "produced" for r in results
                                      if r[0] == "artifact"),
            "l2_bytes_written": sum(s["l2_bytes_written"] for s in stats),
            "l2_bytes_read": sum(s["l2_bytes_read"] for s in stats),
            "l2_timeouts": sum(s["l2_timeouts"] for s in stats),
            "l2_breaker_opens": sum(s["l2_breaker_opens"] for s in stats),
            "fleet_waits": sum(s["fleet_waits"] for s in stats),
            "fleet_wait_hits": sum(s["fleet_wait_hits"] for s in stats),
            "fleet_takeovers": sum(s["fleet_takeovers"] for s in stats),
            "tier_memory": used_memory(servers),
        }
        bad = [r for r in results if r[0] == "artifact" and r[3] != dict(ARTIFACTS)[r[1]]]
        out["artifact_wrong_sizes"] = len(bad)
        return out
    finally:
        for d in nodes:
            d.cleanup()
        srv.cleanup()


def late_joiner(compile_s, join_s, single, tmp):
    """Node b asks for a kernel join_s into node a's compile_s compile of it
    (the probe build's "spin": real CPU time), as a job's nodes start
    seconds apart: b's wall and CPU against compiling it itself."""
    from harness import PROBE_DAEMON, Daemon, small_ir
    srv, url, what, _ = tier(single)
    secret = os.path.join(tmp, "secret")
    with open(secret, "wb") as f:
        f.write(b"fleet bench secret\n")
    ir = b"; ptxcache-probe: spin %d\n" % int(compile_s * 1000) + small_ir("late_%d" % os.getpid())
    nodes = []
    try:
        for _ in range(2):
            nodes.append(Daemon(workers=1, binary=PROBE_DAEMON,
                                extra=["--l2", url, "--l2-secret-file", secret]))
        a, b = nodes
        out = {}
        t = threading.Thread(target=lambda: out.update(a=a.cli(
            "compile", "--arch", "sm_90a", "-", "-o", "-", input=ir, check=False)))
        t0 = time.time()
        t.start()
        time.sleep(join_s)
        t1 = time.time()
        got = b.cli("compile", "--arch", "sm_90a", "-", "-o", "-", input=ir, check=False)
        b_wall = time.time() - t1
        t.join(compile_s * 3 + 60)
        sa, sb = a.stats(), b.stats()
        return {
            "tier": what, "compile_s": compile_s, "join_s": join_s,
            # The probe's spin ends its job as a compile error, which is
            # deterministic: stored and shared like any result. The same
            # answer is the same status, output and log.
            "b_wall_s": b_wall,
            "b_same": (got.returncode, got.stdout, got.stderr) ==
                      (out["a"].returncode, out["a"].stdout, out["a"].stderr),
            "compiles_a": sa["compiles"], "compiles_b": sb["compiles"],
            "b_fleet_wait_hits": sb["fleet_wait_hits"],
            "cpu_saved_s": compile_s * (1 - sb["compiles"]),
        }
    finally:
        for d in nodes:
            d.cleanup()
        srv.cleanup()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=os.environ.get("PTXCACHE_BUILD", "build"))
    ap.add_argument("--out", default=None)
    ap.add_argument("--nodes", type=int, default=16)
    ap.add_argument("--kernels", type=int, default=8)
    ap.add_argument("--produce", type=float, default=3.0)
    ap.add_argument("--single", action="store_true", help="one Redis, not a cluster")
    ap.add_argument("--late", type=float, nargs=2, default=(30.0, 10.0),
                    metavar=("COMPILE_S", "JOIN_S"),
                    help="the late joiner: a compile's length, and when b asks (0 0: skip)")
    args = ap.parse_args()
    os.environ["PTXCACHE_BUILD"] = os.path.abspath(args.build)
    from harness import Skip, triton_kernels
    out_dir = args.out or os.path.join(args.build, "bench")
    os.makedirs(out_dir, exist_ok=True)
    # Distinct kernels (two corpus files may hold the same IR: one key).
    seen, kernels = set(), []
    for k in sorted(triton_kernels(), key=os.path.getsize, reverse=True):
        with open(k, "rb") as f:
            h = hash(f.read())
        if h not in seen and len(kernels) < args.kernels:
            seen.add(h)
            kernels.append(k)
    values = {name: os.urandom(size) for name, size in ARTIFACTS}
    res = {}
    with tempfile.TemporaryDirectory() as tmp:
        try:
            res["alone"] = one_run(1, kernels, values, args.produce, args.single, tmp)
            res["fleet"] = one_run(args.nodes, kernels, values, args.produce, args.single, tmp)
            if args.late[0] > 0:
                res["late"] = late_joiner(args.late[0], args.late[1], args.single, tmp)
        except Skip as e:
            print("fleet: skipped (%s)" % e)
            return 0
    f, a = res["fleet"], res["alone"]
    res["compiles_per_kernel"] = f["compiles"] / len(kernels)
    res["confirmations_per_kernel"] = f["confirm_compiles"] / len(kernels)
    res["producers_per_artifact"] = f["artifact_producers"] / len(ARTIFACTS)
    res["wall_over_alone"] = f["wall_s"] / a["wall_s"]
    with open(os.path.join(out_dir, "fleet.json"), "w") as fh:
        json.dump(res, fh, indent=1)
    print("fleet: %d nodes on %s, %d kernels and %d artifacts (1, 10, 100 MB) each, at once"
          % (f["nodes"], f["tier"], len(kernels), len(ARTIFACTS)))
    print("  compiles per kernel in the fleet %.2f, producers per artifact %.2f (goal 1); "
          "confirmations per kernel in idle time %.2f"
          % (res["compiles_per_kernel"], res["producers_per_artifact"],
             res["confirmations_per_kernel"]))
    print("  wall %.1f s against %.1f s for one node alone (%.2fx)"
          % (f["wall_s"], a["wall_s"], res["wall_over_alone"]))
    print("  through the tier: %.0f MB written, %.0f MB read; tier memory %.0f MB"
          % (f["l2_bytes_written"] / MB, f["l2_bytes_read"] / MB, f["tier_memory"] / MB))
    print("  waits %d (hits %d, takeovers %d), timeouts %d, breaker opens %d, failed %d, "
          "wrong sizes %d" % (f["fleet_waits"], f["fleet_wait_hits"], f["fleet_takeovers"],
                              f["l2_timeouts"], f["l2_breaker_opens"], len(f["failed"]),
                              f["artifact_wrong_sizes"]))
    if "late" in res:
        L = res["late"]
        print("  a node joining %.0f s into another's %.0f s compile: answered in %.1f s "
              "(%s), compiles %d on it and %d on the other; %.0f s of CPU saved"
              % (L["join_s"], L["compile_s"], L["b_wall_s"],
                 "the producer's answer" if L["b_same"] else "NOT THE PRODUCER'S ANSWER", L["compiles_b"], L["compiles_a"],
                 L["cpu_saved_s"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
