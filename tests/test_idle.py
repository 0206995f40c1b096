# SPDX-License-Identifier: Apache-2.0
"""idle-exit (daemon/idle.c): a daemon with it set stops, as on SIGTERM
(exit 0, its socket removed), once no client has been connected and nothing
has been in flight for that long; one that has a client, or is asked again
and again by short-lived ones, stays. Off by default."""
import os
import subprocess
import time

from harness import Daemon, Raw, small_ir


def test_idle_exit_waits_for_clients_then_stops_cleanly():
    with Daemon(workers=1, extra=["--idle-exit", "2", "--log-level", "info"]) as d:
        held = Raw(d.socket)
        time.sleep(3.5)
        assert d.proc.poll() is None, "exited while a client was connected"
        held.close()
        # Short connections, each between two of the daemon's ticks, keep it too.
        until = time.time() + 3.5
        while time.time() < until:
            d.cli("compile", "--arch", "sm_80", "-o", "/dev/null", "-", input=small_ir("idle"))
            time.sleep(0.3)
        assert d.proc.poll() is None, "exited while clients kept coming"
        t0 = time.time()
        assert d.proc.wait(timeout=15) == 0, d.logtext()
        assert 1.5 < time.time() - t0 < 6, time.time() - t0
        assert not os.path.exists(d.socket)
        assert "idle-exit" in d.logtext(), d.logtext()


def test_idle_exit_is_off_by_default():
    with Daemon(workers=1) as d:
        r = subprocess.run([d.args[0], "--print-config"], capture_output=True, text=True)
        assert any(line.split()[:3] == ["idle-exit", "=", "0"] for line in r.stdout.splitlines()), \
            r.stdout
        time.sleep(2.5)
        assert d.proc.poll() is None


def test_fronts_start_one_daemon_of_the_users_own_which_exits_idle():
    """The C side of autostart from the build tree (tests/test_wheel.py has
    it end to end from a wheel): eight llc fronts at once, no daemon
    anywhere, start one ptxcached, the one beside them (autostart.c's
    lock: no other is started to lose the race), which serves all eight
    and exits when idle, its log clean."""
    import shutil
    import tempfile
    from harness import CLI, DAEMON, TRITON_FLAGS, sanitizer_report
    tmp = tempfile.mkdtemp(prefix="ptxcache-auto-")
    try:
        env = {"PATH": "/usr/bin:/bin", "HOME": tmp, "XDG_RUNTIME_DIR": os.path.join(tmp, "run"),
               "XDG_CACHE_HOME": os.path.join(tmp, "cache"), "PTXCACHE_IDLE_EXIT": "2",
               "PTXCACHE_NODE_SOCKET": os.path.join(tmp, "none.sock"), "PTXCACHE_LLC": "/bin/false"}
        for k in ("ASAN_OPTIONS", "LSAN_OPTIONS", "UBSAN_OPTIONS"):
            if k in os.environ:
                env[k] = os.environ[k]
        procs = []
        for i in range(8):
            ir = os.path.join(tmp, "k%d.ll" % i)
            with open(ir, "wb") as f:
                f.write(small_ir("auto%d" % i))
            procs.append(subprocess.Popen([CLI, "llc"] + TRITON_FLAGS + [ir, "-o", ir + ".ptx"],
                                          env=env, stderr=subprocess.PIPE))
        for i, p in enumerate(procs):
            assert p.wait(timeout=120) == 0, p.stderr.read()
            assert b".entry k_auto%d" % i in open(os.path.join(tmp, "k%d.ll.ptx" % i), "rb").read()
        log_path = os.path.join(tmp, "cache", "ptxcache", "ptxcached.log")
        log = open(log_path).read()
        # One daemon started: one listening, and no other started to lose
        # the race (a daemon that finds the socket or the cache taken says
        # so in this log and exits; "listening on" alone would not tell).
        assert log.count("listening on") == 1, log
        assert "in use by another daemon" not in log and "another daemon is serving" not in log, log
        sock = os.path.join(tmp, "run", "ptxcache", "ptxcached.sock")
        r = subprocess.run([CLI, "autostart"], env=env, capture_output=True, text=True)
        assert r.stdout.split() == ["own", sock], r
        def daemon_of(p):
            try:
                return os.path.realpath("/proc/%s/exe" % p) == os.path.realpath(DAEMON) and \
                    sock.encode() in open("/proc/%s/cmdline" % p, "rb").read()
            except OSError:
                return False
        def parent(p):
            try:
                return int(open("/proc/%d/stat" % p).read().rsplit(")", 1)[1].split()[1])
            except OSError:
                return 0
        found = [int(p) for p in os.listdir("/proc") if p.isdigit() and daemon_of(p)]
        # A worker between its fork and its exec looks like its master.
        pid = [p for p in found if parent(p) not in found]
        assert len(pid) == 1, found
        deadline = time.time() + 30
        while os.path.exists(sock) or os.path.exists("/proc/%d/cmdline" % pid[0]) and \
                open("/proc/%d/stat" % pid[0]).read().rsplit(")", 1)[1].split()[0] != "Z":
            assert time.time() < deadline, "the user's daemon did not exit when idle"
            time.sleep(0.1)
        log = open(log_path).read()
        assert "idle-exit" in log and not sanitizer_report(log), log
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def test_a_daemon_that_cannot_start_is_reported_at_once():
    import shutil
    import tempfile
    from harness import CLI
    tmp = tempfile.mkdtemp(prefix="ptxcache-auto-")
    try:
        env = {"PATH": "/usr/bin:/bin", "HOME": tmp, "XDG_RUNTIME_DIR": os.path.join(tmp, "run"),
               "XDG_CACHE_HOME": os.path.join(tmp, "cache"),
               "PTXCACHE_NODE_SOCKET": os.path.join(tmp, "none.sock")}
        for daemon, says in (("/bin/false", "ptxcached exited at start"),
                             (os.path.join(tmp, "missing"), "no ptxcached to start")):
            t0 = time.time()
            r = subprocess.run([CLI, "autostart"], env=dict(env, PTXCACHE_DAEMON=daemon),
                               capture_output=True, text=True, timeout=60)
            assert r.returncode != 0 and says in r.stderr, r
            assert time.time() - t0 < 10, time.time() - t0
        r = subprocess.run([CLI, "autostart"], env=dict(env, PTXCACHE_AUTOSTART="0"),
                           capture_output=True, text=True, timeout=60)
        assert r.returncode != 0 and "PTXCACHE_AUTOSTART=0" in r.stderr, r
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
