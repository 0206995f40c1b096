# SPDX-License-Identifier: Apache-2.0
"""Workers are a trust boundary: exec'd clean, sandboxed before their first
job. Attacks run from inside real workers (build/ptxcached-probe, a
test-only build: daemon/probe.c) are refused by the kernel or kill the
worker, the daemon serves on, and nothing outside changes."""
import os
import re
import signal
import subprocess
import tempfile
import time

from harness import (CLI, DAEMON, LLC, PROBE_DAEMON, SANITIZED, Daemon, Skip, input_path,
                     mp_pack, small_ir, status_kb)
from redis_fixture import RedisServer

PTX = (b".version 8.7\n.target sm_90a\n.address_size 64\n"
       b".visible .entry k() { ret; }\n")

# What may come back from an attack: refused by the kernel, or the worker
# killed by its seccomp filter. Never "ok".
REFUSED = re.compile(r": (Permission denied|Operation not permitted)$")


def need_sandbox():
    if SANITIZED:
        raise Skip("the sandbox is relaxed under AddressSanitizer (sandbox.h)")


def standin_ptxas(t, body):
    """A ptxas stand-in: answers --version as ptxas does, else runs body
    (Python) with the command line in sys.argv."""
    d = os.path.join(t, "cuda", "bin")
    os.makedirs(d)
    p = os.path.join(d, "ptxas")
    with open(p, "w") as f:
        f.write("#!/usr/bin/python3\nimport sys, os, socket\n"
                "if sys.argv[1:] == ['--version']:\n"
                "    print('ptxas: NVIDIA (R) Ptx optimizing assembler\\n"
                "Cuda compilation tools, release 13.0, V13.0.88 (stand-in)')\n"
                "    sys.exit(0)\n" + body)
    os.chmod(p, 0o755)
    return p


def cubin_of_ptx(d, ptx):
    """compile --cubin of PTX text (the CLI takes a .ptx file as PTX)."""
    with tempfile.TemporaryDirectory() as t:
        p = os.path.join(t, "k.ptx")
        with open(p, "wb") as f:
            f.write(ptx)
        return d.cli("compile", "--json", "--cubin", p, check=False)


def attack(d, name, arg="", assembler=False):
    """Run one attack in a worker; its outcome in words."""
    if assembler:
        r = cubin_of_ptx(d, ("// ptxcache-probe: %s %s\n" % (name, arg)).encode() +
                         PTX.replace(b"k()", b"k%d()" % time.monotonic_ns()))
    else:
        r = d.cli("compile", "--json", "-", check=False,
                  input=("; ptxcache-probe: %s %s\n" % (name, arg)).encode() +
                  small_ir("probe_%s_%d" % (name.replace("-", "_"), time.monotonic_ns())))
    out = r.stdout.decode(errors="replace")
    if "signal 31" in out:
        return "killed (SIGSYS)"
    if name == "exec-shell" and "exited with status 0" in out:
        return "ran /bin/sh, which inherits the sandbox"
    m = re.search(r'"log":"%s: ([^"\\]*)' % re.escape(name), out)
    return m.group(1) if m else "?? " + out[:300] + r.stderr.decode(errors="replace")[:300]


def master_state(d):
    with open("/proc/%d/stat" % d.proc.pid) as f:
        return f.read().split(")")[1].split()[0]


def run_attacks(assembler):
    need_sandbox()
    with tempfile.TemporaryDirectory() as t:
        extra = ["--ptxas", standin_ptxas(t, "sys.exit(1)\n")] if assembler else []
        with Daemon(workers=1, binary=PROBE_DAEMON, extra=extra) as d:
            d.cli("compile", "-", input=small_ir("before_attacks"))
            db = os.path.join(d.cache_dir, "cache.db")
            outside = os.path.join(t, "outside")
            attacks = [("open-cache", db), ("read-passwd", ""), ("inet-socket", ""),
                       ("inet-connect", ""), ("connect-daemon", d.socket),
                       ("exec-shell", ""), ("ptrace-master", ""), ("kill-master", ""),
                       ("read-master-memory", ""), ("write-file", outside)]
            table = []
            for name, arg in attacks:
                got = attack(d, name, arg, assembler)
                table.append((name, got))
                assert master_state(d) not in ("T", "Z") and d.proc.poll() is None, (name, got)
                d.cli("compile", "-", input=small_ir("after_" + name.replace("-", "_")))
            profile = "assembler" if assembler else "codegen"
            print("     %s worker: " % profile + "; ".join("%s -> %s" % x for x in table))
            s = d.stats()
            killed = sum(1 for _, g in table if g == "killed (SIGSYS)")
            assert s["sandbox_violations"] == killed, s
            assert not os.path.exists(outside)
            assert json_verify(d)
            return dict(table)


def json_verify(d):
    return d.cli("verify").returncode == 0


def test_compile_worker_refuses_every_attack():
    table = run_attacks(assembler=False)
    # Codegen's allow-list has none of these calls: each kills the worker.
    assert set(table.values()) == {"killed (SIGSYS)"}, table


def test_assembler_worker_refuses_every_attack_but_confined_exec():
    table = run_attacks(assembler=True)
    # The assembler worker must start ptxas, so execve stays: what it
    # starts inherits the same confinement. Everything else is refused.
    for name, got in table.items():
        if name == "exec-shell":
            assert got == "ran /bin/sh, which inherits the sandbox", got
        else:
            assert REFUSED.search(": " + got), (name, got)


def test_ptxas_standin_gets_no_network_and_writes_only_its_directory():
    need_sandbox()
    with tempfile.TemporaryDirectory() as t:
        outside = os.path.join(t, "outside")
        body = ("out = []\n"
                "try:\n    socket.create_connection(('127.0.0.1', 9), timeout=2)\n"
                "    out.append('tcp: ok')\n"
                "except OSError as e:\n    out.append('tcp: ' + e.strerror)\n"
                "try:\n    open(%r, 'w').write('x')\n    out.append('write: ok')\n"
                "except OSError as e:\n    out.append('write: ' + e.strerror)\n"
                "try:\n    open(os.path.join(os.environ['TMPDIR'], 'mine'), 'w').write('x')\n"
                "    out.append('own dir: ok')\n"
                "except OSError as e:\n    out.append('own dir: ' + e.strerror)\n"
                "print('; '.join(out), file=sys.stderr)\nsys.exit(255)\n" % outside)
        with Daemon(workers=1, extra=["--ptxas", standin_ptxas(t, body)]) as d:
            r = cubin_of_ptx(d, PTX.replace(b"k()", b"k_standin()"))
            out = r.stdout.decode(errors="replace")
            print("     ptxas stand-in: " + (re.search(r"tcp: [^\\\\\"]*", out) or [out])[0])
            assert "tcp: Permission denied" in out, out
            assert "write: Permission denied" in out, out
            assert "own dir: ok" in out, out
            assert not os.path.exists(outside)


def test_a_worker_that_claims_a_fatal_error_and_lingers_is_killed_and_not_read():
    # A worker answers as after LLVM's fatal error, which promises its
    # exit, then writes 200 MiB to the master and sleeps: it is killed (it
    # stayed, one more each time, with no timer), and what it writes after
    # its answer is not read into the master's memory (it was, all of it).
    with Daemon(workers=1, binary=PROBE_DAEMON) as d:
        (w,) = d.workers()
        base = status_kb(d.proc.pid, "VmRSS")
        r = d.cli("compile", "--json", "-", check=False,
                  input=b"; ptxcache-probe: fatal-linger 200\n" + small_ir("linger"))
        assert b"fatal-linger: ok" in r.stdout, r.stdout
        for _ in range(100):
            if not os.path.exists("/proc/%d" % w):
                break
            time.sleep(0.1)
        assert not os.path.exists("/proc/%d" % w), "the lingering worker lives on"
        assert SANITIZED or status_kb(d.proc.pid, "VmHWM") - base < 100 << 10
        d.cli("compile", "-", input=small_ir("after_linger"))


def test_a_ptxas_child_that_keeps_the_workers_socket_holds_up_no_job():
    # ptxas (taken over) leaves a child of its own that never exits: it
    # inherited the assembler worker's socket to the master, whose end of
    # file then never came, so neither did the timed-out job's answer, nor
    # that of a request for the same cubin, nor a stop. The socket is not
    # inherited: the job answers at its timeout.
    body = ("import stat, time\n"
            "if os.fork() == 0:\n"
            "    os.setsid()\n"
            "    try:\n"
            "        if stat.S_ISSOCK(os.fstat(3).st_mode):\n"
            "            os.write(3, b'inherited')\n"
            "    except OSError:\n"
            "        pass\n"
            "time.sleep(600)\n")
    with tempfile.TemporaryDirectory() as t:
        standin = standin_ptxas(t, body)
        try:
            with Daemon(workers=1, extra=["--ptxas", standin, "--job-timeout", "2"]) as d:
                for _ in range(2):
                    p = os.path.join(t, "k.ptx")
                    with open(p, "wb") as f:
                        f.write(PTX)
                    r = d.cli("compile", "--json", "--cubin", p, check=False, timeout=30)
                    assert b"\"status\":\"timeout\"" in r.stdout, r.stdout
                assert "bad frame" not in d.logtext(), d.logtext()[-2000:]
        finally:
            for pid in os.listdir("/proc"):
                try:
                    with open("/proc/%s/cmdline" % pid, "rb") as f:
                        if standin.encode() in f.read():
                            os.kill(int(pid), signal.SIGKILL)
                except (OSError, ValueError):
                    pass


def test_release_daemon_has_no_probes():
    """The release binary holds no probe, and a probe's input is just a
    module with a comment to it: compiled as llc compiles it, nothing run."""
    with open(DAEMON, "rb") as f:
        assert b"ptxcache-probe" not in f.read()
    with Daemon(workers=1) as d, tempfile.TemporaryDirectory() as t:
        outside = os.path.join(t, "outside")
        ir = ("; ptxcache-probe: write-file %s\n" % outside).encode() + small_ir("release")
        r = d.cli("llc", "-mtriple=nvptx64", input=ir)
        want = subprocess.run([LLC, "-mtriple=nvptx64"], input=ir, capture_output=True)
        assert r.stdout == want.stdout and not os.path.exists(outside)


def worker_memory_holds(pid, needles):
    """Which of needles occur anywhere in the readable memory of pid, read
    a MiB at a time. Mappings over 4 GiB are skipped: only AddressSanitizer's
    shadow (terabytes reserved, never holding heap bytes) is that large."""
    found, keep, step = set(), max(len(n) for n in needles), 1 << 20
    with open("/proc/%d/maps" % pid) as maps, open("/proc/%d/mem" % pid, "rb", 0) as mem:
        for line in maps:
            addr, perms = line.split()[:2]
            lo, hi = (int(x, 16) for x in addr.split("-"))
            if "r" not in perms or hi - lo > 4 << 30:
                continue
            tail = b""
            for at in range(lo, hi, step):
                try:
                    mem.seek(at)
                    chunk = tail + mem.read(min(step, hi - at))
                except (OSError, ValueError, OverflowError):
                    break
                found.update(n for n in needles if n in chunk)
                tail = chunk[-keep:]
    return found


def test_replaced_worker_holds_no_secret_and_no_other_users_kernel():
    """With the Redis tier's secret loaded and another user's kernel hot in
    the master, a worker started after a replacement has neither in its
    memory: it is exec'd, not forked from the master."""
    secret = b"l2-secret-" + os.urandom(12).hex().encode()
    marker = "kernel_marker_" + os.urandom(8).hex()
    with RedisServer() as redis, tempfile.TemporaryDirectory() as t:
        sf = os.path.join(t, "secret")
        with open(sf, "wb") as f:
            f.write(secret)
        with Daemon(workers=1, extra=["--l2", redis.url, "--l2-secret-file", sf]) as d:
            ir = small_ir("m").replace(b"@k_m", b"@" + marker.encode())
            d.cli("compile", "-", input=ir)
            d.cli("compile", "-", input=ir)          # a hit: hot in the master
            assert worker_memory_holds(d.proc.pid, [secret, marker.encode()]) == \
                {secret, marker.encode()}, "the check itself must see the master's bytes"
            (w1,) = d.workers()
            d.cli("llc", "-mcpu=sm_70", input_path("cannot_select.ll"), "-o", os.devnull,
                  check=False)
            deadline = time.time() + 30
            while True:
                ws = d.workers()
                if ws and ws != [w1]:
                    break
                assert time.time() < deadline
                time.sleep(0.05)
            for w in ws:
                assert worker_memory_holds(w, [secret, marker.encode()]) == set(), w


def test_sandbox_setting_reported_and_checked():
    """stats says what the workers applied; `off` says so; a value other
    than auto, require and off is refused at start; `require` starts where
    the kernel has everything and refuses where it does not."""
    need_sandbox()
    with Daemon(workers=1) as d:
        d.cli("compile", "-", input=small_ir("sandbox_auto"))
        assert d.stats()["sandbox"].startswith("codegen workers: all applied"), d.stats()
    with Daemon(workers=1, extra=["--sandbox", "off"]) as d:
        d.cli("compile", "-", input=small_ir("sandbox_off"))
        assert d.stats()["sandbox"].startswith("codegen workers: off"), d.stats()
        assert "sandbox is off" in d.logtext()
    with tempfile.TemporaryDirectory() as t:
        r = subprocess.run([DAEMON, "--socket", os.path.join(t, "s"), "--cache-dir",
                            os.path.join(t, "c"), "--sandbox", "maybe"],
                           capture_output=True, text=True, timeout=60)
        assert r.returncode != 0 and "sandbox must be auto, require or off" in r.stderr, r.stderr
    with Daemon(workers=1, extra=["--log-level", "info"]) as d:
        complete = "worker sandbox: no_new_privs, seccomp, landlock ABI" in d.logtext() and \
            "incomplete" not in d.logtext()
    if complete:
        with Daemon(workers=1, extra=["--sandbox", "require"]) as d:
            d.cli("compile", "-", input=small_ir("sandbox_require"))


def _sig_field(pid, name):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith(name + ":"):
                return int(line.split()[1], 16)
    raise AssertionError("no %s in /proc/%d/status" % (name, pid))


def test_workers_start_with_the_masters_signal_mask():
    """A worker is spawned with its child on the master's memory until the
    exec (clone with CLONE_VM | CLONE_VFORK, daemon/worker_spawn.c), which blocks
    every signal meanwhile: the worker must still start with the master's
    own mask, so that SIGTERM and SIGHUP reach it and the ptxas it runs,
    and serve."""
    with Daemon(workers=2) as d:
        pids = d.workers()
        assert len(pids) == 2, pids
        master = _sig_field(d.proc.pid, "SigBlk")
        for pid in pids:
            blocked = _sig_field(pid, "SigBlk")
            assert blocked == master, "worker %d blocks %#x, the master %#x" % (
                pid, blocked, master)
            assert not blocked & (1 << (signal.SIGTERM - 1)), "worker %d blocks SIGTERM" % pid
        d.cli("compile", "-o", os.devnull, "-", input=small_ir("mask"))


def test_workers_start_under_a_master_that_is_pid_1():
    """In a container with no init the master is PID 1 of its namespace:
    a new worker's parent check (daemon/worker_spawn.c: the parent is still the
    master, not init or a subreaper) compares with the master's pid, not
    with 1, so its workers start and serve."""
    if os.geteuid() != 0:
        raise Skip("needs root: a pid namespace of the daemon's own (unshare --pid)")
    with Daemon(workers=1, wrap=["unshare", "--pid", "--fork", "--kill-child"]) as d:
        (master,) = [int(p) for p in subprocess.run(["pgrep", "-P", str(d.proc.pid)],
                                                     capture_output=True, text=True).stdout.split()]
        with open("/proc/%d/status" % master) as f:
            assert re.search(r"^NSpid:\s+%d\s+1$" % master, f.read(), re.M), "the master is not PID 1"
        r = d.cli("compile", "--arch", "sm_90a", "-o", "-", "-", input=small_ir("pid1"),
                  timeout=120)
        assert b".entry k_pid1(" in r.stdout, r.stdout[:200]
        s = d.stats()
        assert s["compiles"] == 1 and s["workers_ready"] == s["workers"] == 1, s
        assert s["worker_start_failures"] == 0, s
