# SPDX-License-Identifier: Apache-2.0
"""Many clients at once: single flight (one compile per key, every waiter
gets the same bytes), hits that never wait behind compiles, replies by id
in completion order, users served in turn (a flood waits its turn, no
request is refused below the memory bound), the per-user cap on compiles
running, and the memory bound's refusals. Ordering,
never wall-clock, is what the assertions look at: where a compile must not
finish first, its worker is stopped (SIGSTOP)."""
import os
import signal
import threading
import time

from harness import (TRITON_FLAGS, Daemon, Raw, Skip, frame, llc, mp_pack, mp_unpack, small_ir,
                     triton_kernels)
from sysutil import RawAs, make_reachable

RANKS = 8
KERNELS = 12

def small(tag):
    return small_ir("c_" + tag)


def compile_frame(rid, ir):
    return frame(3, mp_pack({"id": rid, "input": ir, "cpu": "sm_90a", "features": "+ptx90"}))


def distinct_kernels(n):
    """n corpus kernels with distinct contents, the largest first (longest
    compiles, so that ranks overlap)."""
    seen, out = set(), []
    for k in sorted(triton_kernels(), key=os.path.getsize, reverse=True):
        with open(k, "rb") as f:
            b = f.read()
        if b not in seen:
            seen.add(b)
            out.append(k)
        if len(out) == n:
            return out
    raise Skip("corpus has fewer than %d distinct kernels" % n)


def test_8_ranks_same_uncached_kernels_compile_once():
    kernels = distinct_kernels(KERNELS)
    want = {}
    for k in kernels:
        r = llc(TRITON_FLAGS + [k, "-o", "-"])
        assert r.returncode == 0, k
        want[k] = r.stdout
    with Daemon(workers=2) as d:
        go = threading.Barrier(RANKS)
        got = [dict() for _ in range(RANKS)]
        errors = []

        def rank(i):
            go.wait()
            for k in kernels:
                r = d.cli("llc", *TRITON_FLAGS, k, "-o", "-", check=False)
                if r.returncode != 0:
                    errors.append((i, k, r.stderr))
                got[i][k] = r.stdout

        threads = [threading.Thread(target=rank, args=(i,)) for i in range(RANKS)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(300)
        assert not errors, errors[:3]
        for i in range(RANKS):
            for k in kernels:
                assert got[i][k] == want[k], "rank %d: %s differs from llc" % (i, k)
        s = d.stats()
        requests = RANKS * KERNELS
        assert s["compiles"] == KERNELS, s
        assert s["hits"] + s["misses"] == requests, s
        assert s["misses"] - s["dedup_joins"] == KERNELS, s
        assert s["dedup_joins"] > 0, s
    print("     %d ranks x %d kernels: %d requests, %d compiles, %d joined in flight, %d hits; "
          "all bytes identical to llc" % (RANKS, KERNELS, requests, s["compiles"],
                                           s["dedup_joins"], s["hits"]))


def test_joined_waiters_on_one_connection_get_same_bytes():
    """Identical requests pipelined on one connection while the compile is
    held back: one compile, every id answered with the same output."""
    with Daemon(workers=1) as d:
        (w,) = d.workers()
        os.kill(w, signal.SIGSTOP)
        try:
            c = Raw(d.socket, timeout=60)
            ir = small("join")
            c.send(b"".join(compile_frame(i, ir) for i in range(1, 7)))
            for _ in range(100):
                if d.stats()["dedup_joins"] == 5:
                    break
                time.sleep(0.02)
        finally:
            os.kill(w, signal.SIGCONT)
        replies = [mp_unpack(c.recv_frame()[1]) for _ in range(6)]
        assert sorted(r["id"] for r in replies) == list(range(1, 7)), replies
        assert len(set(r["output"] for r in replies)) == 1 and replies[0]["output"], replies
        assert all(r["status"] == 0 and r["cached"] is False for r in replies), replies
        s = d.stats()
        assert s["compiles"] == 1 and s["dedup_joins"] == 5, s


def test_hits_never_wait_behind_compiles():
    """The only worker is stopped with compiles queued behind it: a hit on
    the same connection overtakes them, and a hit from another client is
    answered at once; the compiles finish once the worker runs again."""
    hit_ir = small("hit")
    with Daemon(workers=1) as d:
        prime = Raw(d.socket, timeout=60)
        prime.send(compile_frame(1, hit_ir))
        assert mp_unpack(prime.recv_frame()[1])["status"] == 0
        (w,) = d.workers()
        os.kill(w, signal.SIGSTOP)
        try:
            c = Raw(d.socket, timeout=60)
            c.send(b"".join(compile_frame(i, small("miss%d" % i)) for i in range(1, 5)) +
                   compile_frame(99, hit_ir))
            first = mp_unpack(c.recv_frame()[1])
            assert first["id"] == 99 and first["cached"] is True, first
            s = d.stats()
            assert s["jobs_running"] + s["jobs_queued"] == 4, s
            other = Raw(d.socket, timeout=60)
            other.send(compile_frame(7, hit_ir))
            r = mp_unpack(other.recv_frame()[1])
            assert r["id"] == 7 and r["cached"] is True and r["output"] == first["output"], r
            # Still only the priming compile: the hits did not wait.
            assert d.stats()["compiles"] == 1
        finally:
            os.kill(w, signal.SIGCONT)
        rest = [mp_unpack(c.recv_frame()[1]) for _ in range(4)]
        assert sorted(r["id"] for r in rest) == [1, 2, 3, 4], rest
        assert all(r["status"] == 0 and r["output"] for r in rest), rest


def padded(tag, size):
    """A small kernel whose request is about size bytes (a long comment)."""
    return small(tag) + b"; " + b"x" * size + b"\n"


def test_flood_waits_its_turn_and_another_users_request_goes_first():
    """One user's eight misses queued behind a stopped worker, then another
    user's one: nothing is refused, and once the worker runs the other
    user's request is served next (fair queueing: the flood's user has
    had a quantum of worker time more), not after the whole flood."""
    nobody = 65534
    with Daemon(workers=1, extra=["--allow-users", str(nobody)]) as d:
        make_reachable(d.socket)
        (w,) = d.workers()
        os.kill(w, signal.SIGSTOP)
        try:
            flood = Raw(d.socket, timeout=120)
            flood.send(b"".join(compile_frame(i, small("flood%d" % i)) for i in range(1, 9)))
            d.wait_stats(lambda s: s["jobs_running"] == 1 and s["jobs_queued"] == 7, "the flood")
            other = RawAs(d.socket, nobody, compile_frame(1, small("single")))
            s = d.wait_stats(lambda s: s["jobs_queued"] == 8, "the other user's request")
            assert s["users_waiting"] == 2 and s["refused_jobs"] == 0, s
            time.sleep(0.3)     # the flood's running job: worker time, a quantum's worth
        finally:
            os.kill(w, signal.SIGCONT)
        got = []

        def read_flood():
            for _ in range(8):
                r = mp_unpack(flood.recv_frame()[1])
                got.append((time.time(), r))
        reader = threading.Thread(target=read_flood)
        reader.start()
        (t_other, typ, body), = other.replies()
        reader.join(120)
        assert typ == 0x83 and mp_unpack(body)["status"] == 0, body
        assert sorted(r["id"] for _, r in got) == list(range(1, 9)), got
        assert all(r["status"] == 0 for _, r in got), got
        before = sum(t < t_other for t, _ in got)
        # The job that was running (and one more, for a slow reader); first
        # come, first served would have put all eight first.
        assert before <= 2, "%d of the flood's replies came before the other user's" % before
        s = d.stats()
        assert s["refused_jobs"] == 0 and s["compiles"] == 9, s
    print("     flood of 8, then another user's 1: %d of the flood answered before it" % before)


def test_per_user_running_cap_queues_the_rest():
    """max-jobs-per-uid caps one user's compiles running at once; the rest
    wait in the queue (none refused) and all finish."""
    with Daemon(workers=2, extra=["--max-jobs-per-uid", "1", "--sharing", "trust"]) as d:
        ws = d.workers()
        for w in ws:
            os.kill(w, signal.SIGSTOP)
        try:
            c = Raw(d.socket, timeout=120)
            c.send(b"".join(compile_frame(i, small("capped%d" % i)) for i in range(1, 4)))
            s = d.wait_stats(lambda s: s["jobs_running"] + s["jobs_queued"] == 3, "queued")
            time.sleep(0.2)
            s = d.stats()
            assert s["jobs_running"] == 1 and s["jobs_queued"] == 2, s
            assert s["refused_jobs"] == 0, s
        finally:
            for w in ws:
                os.kill(w, signal.SIGCONT)
        done = [mp_unpack(c.recv_frame()[1]) for _ in range(3)]
        assert sorted(x["id"] for x in done) == [1, 2, 3], done
        assert all(x["status"] == 0 for x in done), done


def test_memory_bound_refuses_with_the_reason():
    """Past max-queued-bytes-per-uid a user's new compile is refused as
    busy, the bound named in the message; other users go on until the
    daemon's own bound (max-queued-bytes), named likewise; a joined
    request and a small one that fits are taken; all accepted finish."""
    b, c = 65534, 54321
    with Daemon(workers=1, extra=["--allow-users", "%d,%d" % (b, c), "--sharing", "trust",
                                  "--max-queued-bytes-per-uid", "64K",
                                  "--max-queued-bytes", "100K"]) as d:
        make_reachable(d.socket)
        (w,) = d.workers()
        os.kill(w, signal.SIGSTOP)
        try:
            root = Raw(d.socket, timeout=120)
            root.send(compile_frame(1, padded("big1", 40000)))
            d.wait_stats(lambda s: s["jobs_running"] == 1, "the first compile")
            root.send(compile_frame(2, padded("big2", 40000)) +
                      compile_frame(3, padded("big1", 40000)))  # joins 1: holds nothing
            t, body = root.recv_frame()
            e = mp_unpack(body)
            assert t == 0xff and e["id"] == 2 and e["code"] == "busy", e
            assert "uid 0" in e["message"] and "max-queued-bytes-per-uid" in e["message"], e
            ok_b = RawAs(d.socket, b, compile_frame(1, padded("big3", 40000)))
            d.wait_stats(lambda s: s["jobs_queued"] == 1, "the second user's compile")
            refused_c = RawAs(d.socket, c, compile_frame(1, padded("big4", 40000)))
            (_, typ, body), = refused_c.replies()
            e = mp_unpack(body)
            assert typ == 0xff and e["code"] == "busy", e
            assert "max-queued-bytes " in e["message"] and "per-uid" not in e["message"], e
            ok_c = RawAs(d.socket, c, compile_frame(2, small("fits")))
            s = d.wait_stats(lambda s: s["jobs_queued"] == 2, "the small compile")
            assert s["refused_jobs"] == 2 and s["dedup_joins"] == 1, s
            assert 80000 < s["queued_bytes"] < 100000, s
        finally:
            os.kill(w, signal.SIGCONT)
        done = [mp_unpack(root.recv_frame()[1]) for _ in range(2)]
        assert sorted(x["id"] for x in done) == [1, 3] and all(x["status"] == 0 for x in done), done
        for r in (ok_b, ok_c):
            (_, typ, body), = r.replies()
            assert typ == 0x83 and mp_unpack(body)["status"] == 0, body
        s = d.stats()
        assert s["queued_bytes"] == 0 and s["refused_jobs"] == 2, s
    print("     refused past each bound: %r" % e["message"])
