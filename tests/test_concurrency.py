"""Many clients at once: single flight (one compile per key, every waiter
gets the same bytes), hits that never wait behind compiles, replies by id
in completion order, and the per-user cap on compiles in flight. Ordering,
never wall-clock, is what the assertions look at: where a compile must not
finish first, its worker is stopped (SIGSTOP)."""
import os
import signal
import subprocess
import threading
import time

from harness import (CLI, TRITON_FLAGS, cli_for_others, Daemon, Raw, Skip, frame, llc, mp_pack, mp_unpack, small_ir,
                     triton_kernels)

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


def as_user(uid):
    def drop():
        os.setgroups([])
        os.setgid(uid)
        os.setuid(uid)
    return drop


def test_per_user_job_cap_refuses_flood_not_others():
    """One user's flood of misses is capped (--max-jobs-per-uid): the excess
    is refused as busy, joining a compile in flight is not counted, and
    another user's miss is still accepted and their hit answered."""
    if os.geteuid() != 0:
        raise Skip("needs root to act as a second user")
    nobody = 65534
    hit_ir = small("cap_hit")
    # sharing = trust: root's entry answers the other user at once (under
    # confirm it would first be confirmed by a worker of that user's own).
    with Daemon(workers=1, extra=["--max-jobs-per-uid", "2", "--allow-users", str(nobody),
                                  "--sharing", "trust"]) as d:
        for p in (d.tmp, os.path.dirname(d.socket)):
            os.chmod(p, 0o755)
        os.chmod(d.socket, 0o666)
        d.cli("compile", "-", input=hit_ir)
        (w,) = d.workers()
        os.kill(w, signal.SIGSTOP)
        other = None
        try:
            c = Raw(d.socket, timeout=60)
            c.send(b"".join(compile_frame(i, small("flood%d" % i)) for i in range(1, 5)) +
                   compile_frame(5, small("flood1")))
            busy = [mp_unpack(c.recv_frame()[1]) for _ in range(2)]
            assert sorted(b["id"] for b in busy) == [3, 4], busy
            assert all(b["code"] == "busy" for b in busy), busy
            s = d.stats()
            assert s["refused_jobs"] == 2 and s["dedup_joins"] == 1, s
            env = dict(os.environ, PTXCACHE_SOCKET=d.socket, HOME="/")
            r = subprocess.run([cli_for_others(), "compile", "--json", "-"], input=hit_ir, env=env,
                               capture_output=True, timeout=60, preexec_fn=as_user(nobody))
            assert r.returncode == 0 and b'"cached":true' in r.stdout, r.stderr
            other = subprocess.Popen([cli_for_others(), "compile", "--json", "-"],
                                     stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env,
                                     preexec_fn=as_user(nobody))
            other.stdin.write(small("other_user"))
            other.stdin.close()
            for _ in range(500):
                if d.stats()["jobs_running"] + d.stats()["jobs_queued"] == 3:
                    break
                time.sleep(0.01)
            s = d.stats()
            assert s["jobs_running"] + s["jobs_queued"] == 3 and s["refused_jobs"] == 2, s
        finally:
            os.kill(w, signal.SIGCONT)
        out, err = other.stdout.read(), other.stderr.read()
        other.wait(120)
        assert other.returncode == 0 and b'"status":"ok"' in out, err
        done = [mp_unpack(c.recv_frame()[1]) for _ in range(3)]
        assert sorted(x["id"] for x in done) == [1, 2, 5], done
        assert all(x["status"] == 0 for x in done), done
