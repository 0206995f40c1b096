# SPDX-License-Identifier: Apache-2.0
"""No user can change what another user receives (daemon/confirm.h): each
worker serves one user, an entry reaches a second user only once a worker
of another tenant computed the same bytes (a fresh one in idle time, or
that user's own), a mismatch is an alarm, and only confirmed entries reach
the Redis tier. Confirmation never delays a reply: it runs only on cores
the compiles leave, stopped while any compile waits, its queue bounded.
Clients of three users (root, nobody and a uid of no account) on one real
daemon."""
import os
import signal
import socket
import tempfile
import time

from harness import LLC, PROBE_DAEMON, Daemon, Raw, Skip, frame, mp_pack, mp_unpack, small_ir
from redis_fixture import RedisServer
from sysutil import cli_as, make_reachable

B, C = 65534, 54321
FLAGS = ["-mtriple=nvptx64", "-mcpu=sm_90a"]


def llc_bytes(ir):
    import subprocess
    return subprocess.run([LLC] + FLAGS, input=ir, capture_output=True, check=True).stdout


def as_user(d, uid, ir):
    r = cli_as(d.socket, uid, uid, "llc", *FLAGS, input=ir)
    assert r.returncode == 0, r.stderr
    return r.stdout


def daemon(**kw):
    if os.geteuid() != 0:
        raise Skip("needs root to run clients as other users")
    extra = ["--allow-users", "%d,%d" % (B, C)] + kw.pop("extra", [])
    d = Daemon(workers=2, extra=extra, **kw)
    make_reachable(d.socket)
    return d


def test_one_user_pays_nothing_in_the_foreground_then_everyone_hits():
    """A first user's compiles are answered as they come; each new entry is
    confirmed afterwards, in idle time, by a worker of its own; then a
    second and a third user hit, and nothing is compiled again."""
    kernels = [small_ir("share%d" % i) for i in range(4)]
    with daemon() as d:
        for k in kernels:
            assert d.cli("llc", *FLAGS, input=k).stdout == llc_bytes(k)
        s = d.stats()
        assert s["compiles"] == 4 and s["sharing"] == "confirm", s
        s = d.wait_stats(lambda s: s["confirmations"] == 4, "four confirmations")
        assert s["confirm_compiles"] == 4 and s["confirm_mismatches"] == 0, s
        assert s["confirms_pending"] == 0 and s["confirms_dropped"] == 0, s
        for k in kernels:                       # confirmed: everyone hits
            assert as_user(d, B, k) == llc_bytes(k)
            assert as_user(d, C, k) == llc_bytes(k)
            assert d.cli("llc", *FLAGS, input=k).stdout == llc_bytes(k)
        s = d.stats()
        assert s["compiles"] == 4 and s["confirm_compiles"] == 4 and s["hits"] == 12, s


def test_second_user_confirms_by_compiling_when_no_idle_time_came():
    """Without background confirmation (confirm-workers 0) a second user
    compiles an entry itself, which confirms it; a third user then hits."""
    kernels = [small_ir("noidle%d" % i) for i in range(2)]
    with daemon(extra=["--confirm-workers", "0"]) as d:
        for k in kernels:
            d.cli("llc", *FLAGS, input=k)
        for k in kernels:
            assert as_user(d, B, k) == llc_bytes(k)
        s = d.stats()
        assert s["compiles"] == 4 and s["confirmations"] == 2, s
        assert s["confirm_compiles"] == 0 and s["confirms_dropped"] == 2, s
        for k in kernels:
            assert as_user(d, C, k) == llc_bytes(k)
        assert d.stats()["compiles"] == 4


def test_confirmation_stops_while_foreground_jobs_wait():
    """One worker: a confirmation that takes a while (the probe "spin",
    1.5 s of CPU) runs in idle time; a user's compiles (0.15 s each)
    arrive: the
    confirmation is stopped at once (SIGSTOP) and stays stopped while any
    of them waits or runs (the stats never show it running then); they are
    answered without waiting for it; then it goes on and confirms."""
    spin = b"; ptxcache-probe: spin 1500\n" + small_ir("spin")
    with Daemon(workers=1, binary=PROBE_DAEMON) as d:
        r = d.cli("compile", "--json", "-", input=spin, check=False)
        assert b"spin: ok" in r.stdout, r.stdout
        d.wait_stats(lambda s: s["confirms_running"] == 1, "the confirmation running")
        (bg,) = d.workers(background=True)
        c = Raw(d.socket, timeout=60)
        t0 = time.time()
        c.send(b"".join(frame(3, mp_pack({"id": i, "cpu": "sm_90a", "input":
                                          b"; ptxcache-probe: spin 150\n" + small_ir("fg%d" % i)}))
                        for i in range(1, 5)))
        samples, replies, ticks = [], [], []
        c.s.settimeout(0.005)
        while len(replies) < 4:
            s = d.stats()
            with open("/proc/%d/stat" % bg) as f:
                fields = f.read().rsplit(")", 1)[1].split()
            s2 = d.stats()
            samples += [s, s2]
            # Stopped all along from s to s2 (and since the first such
            # sample): its CPU time (utime + stime, in ticks) stands still.
            if s["confirms_paused"] and s2["confirms_paused"] and \
                    s["confirm_pauses"] == s2["confirm_pauses"] == 1:
                ticks.append(int(fields[11]) + int(fields[12]))
            try:
                replies.append(mp_unpack(c.recv_frame()[1]))
            except socket.timeout:
                pass
        took = time.time() - t0
        assert sorted(x["id"] for x in replies) == [1, 2, 3, 4], replies
        assert all(x["status"] == 2 and x["log"] == "spin: ok\n" for x in replies), replies
        busy = [x for x in samples if x["jobs_queued"] or x["jobs_running"]]
        assert busy and all(x["confirms_running"] == 0 for x in busy), busy
        assert any(x["confirms_paused"] == 1 for x in busy), busy
        assert len(ticks) >= 2 and ticks[-1] - ticks[0] <= 2, ticks
        s = d.wait_stats(lambda s: s["confirmations"] == 1, "the confirmation")
        assert s["confirm_pauses"] >= 1 and s["confirm_compiles"] == 1, s
        assert s["confirm_mismatches"] == 0 and s["worker_crashes"] == 0, s
    print("     4 compiles of 0.15 s answered in %.2f s beside a stopped 1.5 s confirmation "
          "(%d stats samples, none with it running; its CPU time meanwhile +%d ticks)"
          % (took, len(samples), ticks[-1] - ticks[0]))


def test_a_stopped_confirmation_cancelled_by_a_reload_is_counted_out():
    """confirm-workers set to 0 by a reload while the confirmation is
    stopped for a user's compile: it is cancelled, and the counters say
    that nothing confirms any more (it was counted running again for good
    when the worker it had stopped was let go to die)."""
    spin = b"; ptxcache-probe: spin 1500\n" + small_ir("cancelled")
    with tempfile.TemporaryDirectory() as t:
        conf = os.path.join(t, "ptxcached.conf")
        with open(conf, "w") as f:
            f.write("")
        with Daemon(workers=1, binary=PROBE_DAEMON,
                    extra=["--config", conf, "--log-level", "info"]) as d:
            r = d.cli("compile", "--json", "-", input=spin, check=False)
            assert b"spin: ok" in r.stdout, r.stdout
            d.wait_stats(lambda s: s["confirms_running"] == 1, "the confirmation running")
            c = Raw(d.socket, timeout=60)
            c.send(frame(3, mp_pack({"id": 1, "cpu": "sm_90a", "input":
                                     b"; ptxcache-probe: spin 1000\n" + small_ir("fg")})))
            d.wait_stats(lambda s: s["confirms_paused"] == 1, "the confirmation stopped")
            with open(conf, "w") as f:
                f.write("confirm-workers = 0\n")
            d.proc.send_signal(signal.SIGHUP)
            # Let go (to die) while the user's compile still ran: while stopped.
            s = d.wait_stats(lambda s: not s["confirms_paused"], "the reload")
            assert s["jobs_running"] == 1, s
            assert mp_unpack(c.recv_frame()[1])["log"] == "spin: ok\n"
            s = d.wait_stats(lambda s: s["confirm_workers_live"] == 0 and not s["confirms_paused"],
                             "the confirmation cancelled")
            assert s["confirms_running"] == 0 and s["confirmations"] == 0, s
            d.cli("ping")


def test_pending_confirmations_are_bounded_oldest_dropped():
    """Confirmations wait while compiles keep the one worker busy; past
    confirm-queue bytes the oldest are dropped and counted; the rest run
    afterwards."""
    big = [small_ir("bound%d" % i) + b"; " + b"x" * 20000 + b"\n" for i in range(8)]
    with Daemon(workers=1, extra=["--confirm-queue", "64K"]) as d:
        c = Raw(d.socket, timeout=60)
        c.send(b"".join(frame(3, mp_pack({"id": i + 1, "input": k, "cpu": "sm_90a"}))
                        for i, k in enumerate(big)))
        replies = [mp_unpack(c.recv_frame()[1]) for _ in range(8)]
        assert all(x["status"] == 0 for x in replies), replies
        s = d.wait_stats(lambda s: s["confirmations"] + s["confirms_dropped"] == 8,
                       "the confirmations")
        # 64 KiB holds three of these (20 KB and a flight's overhead each).
        assert s["confirms_dropped"] == 5 and s["confirmations"] == 3, s
        assert s["confirms_pending"] == 0 and s["confirms_pending_bytes"] == 0, s


def test_trust_shares_at_once_and_separate_never():
    k = small_ir("policy")
    with daemon(extra=["--sharing", "trust"]) as d:
        d.cli("llc", *FLAGS, input=k)
        assert as_user(d, B, k) == llc_bytes(k)
        assert d.stats()["compiles"] == 1
    with daemon(extra=["--sharing", "separate"]) as d, tempfile.TemporaryDirectory() as t:
        d.cli("llc", *FLAGS, input=k)
        as_user(d, B, k)
        as_user(d, B, k)
        s = d.stats()
        assert s["compiles"] == 2 and s["confirmations"] == 0, s
        # Cubins too: a PTX file's key holds no uid, the producer decides.
        ptx = os.path.join(t, "k.ptx")
        with open(ptx, "wb") as f:
            f.write(llc_bytes(small_ir("separate_cubin")))
        os.chmod(t, 0o755)
        os.chmod(ptx, 0o644)
        r = d.cli("compile", "--json", "--cubin", ptx, check=False)
        if b'"status":"unavailable"' not in r.stdout:       # a ptxas here
            r2 = cli_as(d.socket, B, B, "compile", "--json", "--cubin", ptx)
            assert r2.returncode == 0 and b'"cached":false' in r2.stdout, r2.stdout
            assert d.stats()["compiles"] == 4


def test_compromised_worker_changes_only_what_its_own_user_receives():
    """User A's worker is taken over (the test-only "compromise" probe: it
    answers every compile with altered PTX from then on). A gets the altered
    bytes for kernel K (its own worker); B gets llc's; the mismatch is an
    alarm, counted once; Redis's values for everyone never hold the altered
    bytes (A's own may); C gets llc's."""
    k = small_ir("victim")
    with RedisServer() as redis, tempfile.TemporaryDirectory() as t:
        secret = os.path.join(t, "secret")
        with open(secret, "wb") as f:
            f.write(b"secret for the confirmation test")
        with daemon(binary=PROBE_DAEMON, extra=["--l2", redis.url, "--l2-secret-file", secret]) as d:
            r = d.cli("compile", "--json", "-", check=False,
                      input=b"; ptxcache-probe: compromise\n" + small_ir("takeover"))
            assert b"compromise: ok" in r.stdout, r.stdout
            altered = d.cli("llc", *FLAGS, input=k).stdout
            assert altered.startswith(b"// altered by a compromised worker"), altered[:80]
            assert as_user(d, B, k) == llc_bytes(k)
            assert as_user(d, C, k) == llc_bytes(k)
            s = d.stats()
            assert s["confirm_mismatches"] == 1, s
            assert "confirmation mismatch" in d.logtext() and "uid 0" in d.logtext()
            # A, whose worker it is, is still served its own bytes.
            assert d.cli("llc", *FLAGS, input=k).stdout == altered
            # Redis's values for everyone never hold them; A's own (for A
            # on other nodes alone, flight.c's own_key()) may.
            altered_in = [key for key in redis.keys("ptxcache:*")
                          if b"altered by a compromised worker" in (redis.get(key) or b"")]
            assert all(key.startswith("ptxcache:own:u0:") for key in altered_in), altered_in


def test_entries_made_under_trust_stay_their_producers_after_a_switch_to_confirm():
    """An entry stored under sharing = trust records who produced it, so
    that a site that moves to confirm serves it to nobody else until
    another user's worker has computed the same bytes: a switch of policy
    never widens who is served what."""
    k = small_ir("trust_then_confirm")
    with daemon(extra=["--sharing", "trust"]) as d:
        assert d.cli("llc", *FLAGS, input=k).stdout == llc_bytes(k)     # uid 0 produces
        assert d.stats()["compiles"] == 1
        d.stop()
        d.args[d.args.index("trust")] = "confirm"
        d.start()
        make_reachable(d.socket)
        assert as_user(d, B, k) == llc_bytes(k)
        s = d.stats()
        assert s["sharing"] == "confirm", s
        # B was not served uid 0's unconfirmed entry: its own worker
        # compiled it, which confirmed the entry.
        assert s["hits"] == 0 and s["compiles"] == 1 and s["confirmations"] == 1, s
        assert s["confirm_mismatches"] == 0, s
        assert as_user(d, C, k) == llc_bytes(k)                         # confirmed: C hits
        assert d.stats()["compiles"] == 1
        assert d.cli("llc", *FLAGS, input=k).stdout == llc_bytes(k)
        assert d.stats()["compiles"] == 1
