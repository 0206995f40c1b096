# SPDX-License-Identifier: Apache-2.0
"""A daemon that stops answering costs a compile seconds, not the call's
timeout: the daemon acknowledges a waiting request at once and sends a
progress frame about every second while its job is queued or running; a
client that hears nothing for its silence bound (PTXCACHE_SILENCE_MS) gives
up, and the fronts run the real tool. A compile that takes far longer than
the bound still completes through the daemon.

The faults: the real daemon stopped with SIGSTOP (stuck on a disk, in a
debugger, starved); a socket that accepts but never reads; a server that
dies (or falls silent) halfway through a reply. The last two are small
Python stand-ins: the real daemon cannot be made to do either. Each front
(`ptxcache llc`, the ptxas front, the library through `ptxcache compile`)
is timed against each; the times are printed, and asserted only to be far
below the old 300 s call timeout."""
import json
import os
import signal
import socket
import struct
import subprocess
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor

from harness import (CLI, c_client, LLC, PROBE_DAEMON, PROGRESS, Daemon, Raw, corpus,
                     frame, mp_pack, mp_unpack, small_ir)

SILENCE_MS = 2000
BOUND_S = 60            # a fallback must come long before this (was: 300 s)
LLC_FLAGS = ["-mtriple=nvptx64-nvidia-cuda", "-mcpu=sm_90a", "-O3"]


def real_ptxas():
    for p in [os.environ.get("PTXCACHE_PTXAS", ""),
              os.path.join(os.environ.get("CUDA_HOME", "/nonexistent"), "bin", "ptxas"),
              "/usr/local/cuda/bin/ptxas"]:
        if p and os.path.isfile(p) and os.access(p, os.X_OK):
            return p
    return None


def read(path):
    with open(path, "rb") as f:
        return f.read()


def write(path, data):
    with open(path, "wb") as f:
        f.write(data)
    return path


def failing_tool(t, name):
    """A "real tool" that must not run: exits 99 and says so."""
    p = write(os.path.join(t, name), b"#!/bin/sh\necho 'the real tool ran' >&2\nexit 99\n")
    os.chmod(p, 0o755)
    return p


class Fronts:
    """The three clients of one socket, each timed; inputs of their own in
    directory t (tag keeps cache entries apart)."""

    def __init__(self, t, sock, tag, silence_ms=SILENCE_MS, ir=None, ptx=None):
        self.t, self.sock = t, sock
        self.env = dict(os.environ, PTXCACHE_SOCKET=sock, PTXCACHE_SILENCE_MS=str(silence_ms))
        self.ir = write(os.path.join(t, tag + ".ll"), ir or small_ir(tag))
        self.ptxas = real_ptxas()
        self.ptx = None
        if self.ptxas:
            self.ptx = write(os.path.join(t, tag + ".ptx"),
                             ptx if ptx is not None else read(corpus(".triton.ptx")[0]))
            self.front = os.path.join(t, "bin", "ptxas")
            os.makedirs(os.path.dirname(self.front), exist_ok=True)
            if not os.path.exists(self.front):
                os.symlink(CLI, self.front)

    def _run(self, cmd, env=None):
        t0 = time.monotonic()
        r = subprocess.run(cmd, capture_output=True, cwd=self.t, timeout=300,
                           env=dict(self.env, **(env or {})))
        return r, time.monotonic() - t0

    def llc(self, env=None):
        out = self.ir + ".s"
        if os.path.exists(out):
            os.unlink(out)
        r, s = self._run([CLI, "llc", *LLC_FLAGS, self.ir, "-o", out], env)
        return r, s, read(out) if os.path.exists(out) else None

    def ptxas_front(self, env=None):
        out = self.ptx + ".o"
        if os.path.exists(out):
            os.unlink(out)
        r, s = self._run([self.front, "--gpu-name=sm_90a", "-O3", self.ptx, "-o", out], env)
        return r, s, read(out) if os.path.exists(out) else None

    def cli(self, env=None):
        return self._run([CLI, "compile", *["--arch", "sm_90a", "-O3"], "--json", self.ir], env)

    def want_llc(self):
        r = subprocess.run([LLC, *LLC_FLAGS, self.ir, "-o", "-"], capture_output=True, check=True)
        return r.stdout

    def want_cubin(self):
        out = self.ptx + ".want.o"
        subprocess.run([self.ptxas, "--gpu-name=sm_90a", "-O3", self.ptx, "-o", out],
                       capture_output=True, check=True)
        return read(out)


def check_fallbacks(fr, what, silent=True):
    """Each front, facing a daemon that says nothing, gives up within the
    silence bound: the llc and ptxas fronts with the real tool's output,
    the CLI with an error that says why. silent: the daemon goes quiet
    (rather than closing), so each waited out the bound first. Returns the
    times."""
    times = {}
    least = SILENCE_MS / 1000 - 0.05 if silent else 0

    def timed(tool, s):
        assert least <= s < BOUND_S, (what, tool, s)
        times[tool] = s

    r, s, out = fr.llc()
    assert r.returncode == 0 and out == fr.want_llc(), (what, r.returncode, r.stderr)
    timed("llc", s)
    if fr.ptxas:
        r, s, cubin = fr.ptxas_front()
        assert r.returncode == 0 and cubin == fr.want_cubin(), (what, r.returncode, r.stderr)
        timed("ptxas", s)
    r, s = fr.cli()
    assert r.returncode != 0, (what, r.stdout)
    timed("cli", s)
    return times, r.stderr.decode(errors="replace").strip()


def report(what, times, msg):
    print("     %s (silence bound %.1f s): %s; CLI: %s" % (
        what, SILENCE_MS / 1000, ", ".join("%s %.2f s" % kv for kv in times.items()),
        msg[:120]))


# ---- stand-ins for faults the real daemon cannot be made to have -------

class FakeServer:
    """A Unix socket server on a thread: handler(conn) per connection."""

    def __init__(self, t, handler):
        self.path = os.path.join(t, "fake.sock")
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.bind(self.path)
        self.sock.listen(64)
        self.handler = handler
        self.conns = []
        self.accepted = 0
        self.stop = False
        self.thread = threading.Thread(target=self._loop, daemon=True)
        self.thread.start()

    def _loop(self):
        self.sock.settimeout(0.2)
        while not self.stop:
            try:
                c, _ = self.sock.accept()
            except socket.timeout:
                continue
            except OSError:
                return
            self.accepted += 1
            self.conns.append(c)
            threading.Thread(target=self.handler, args=(c,), daemon=True).start()

    def close(self):
        self.stop = True
        self.thread.join()
        for c in self.conns:
            c.close()
        self.sock.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def never_read(conn):
    pass                # accepted, held open, never read


def read_request(conn):
    """One whole request frame; its (type, id), or None at EOF."""
    def exact(n):
        b = b""
        while len(b) < n:
            c = conn.recv(n - len(b))
            if not c:
                return None
            b += c
        return b
    hdr = exact(8)
    if not hdr:
        return None
    body = exact(struct.unpack(">I", hdr[4:8])[0])
    return hdr[3], mp_unpack(body)["id"]


def half_reply(close):
    """Answer the first request with half of a compile reply, then close
    (the daemon died mid-reply) or hold the connection silent."""
    def handler(conn):
        req = read_request(conn)
        if req is None:
            return
        body = mp_pack({"id": req[1], "status": 0, "cached": False, "key": "a" * 64,
                        "output": b"x" * 4096})
        whole = frame(req[0] | 0x80, body)
        conn.sendall(whole[:len(whole) // 2])
        if close:
            conn.close()
    return handler


# ---- the daemon's side -----------------------------------------------

def test_daemon_acknowledges_a_waiting_request_at_once_and_keeps_it_informed():
    """A compile that waits gets a progress frame at once (before any
    worker is done), then one about every second until its reply; a hit
    gets its reply and no progress; progress for one request does not
    delay another's reply on the same connection."""
    slow = b"; ptxcache-probe: slow 4\n" + small_ir("progress_slow")
    with Daemon(workers=2, binary=PROBE_DAEMON) as d:
        c = Raw(d.socket, timeout=30)
        t0 = time.monotonic()
        c.send(frame(3, mp_pack({"id": 7, "input": slow, "cpu": "sm_90a"})))
        ft, body = c.recv_frame(progress=True)
        first = time.monotonic() - t0
        m = mp_unpack(body)
        assert ft == PROGRESS and m["id"] == 7 and m["state"] in ("queued", "running"), (ft, m)
        assert first < 1.0, first
        # A second request on the connection meanwhile: a fast miss, then a hit.
        fast = small_ir("progress_fast")
        states, replies, stamps = [m["state"]], {}, [first]
        for rid in (8, 9):
            c.send(frame(3, mp_pack({"id": rid, "input": fast, "cpu": "sm_90a"})))
            while rid not in replies:
                ft, body = c.recv_frame(progress=True)
                m = mp_unpack(body)
                if ft == PROGRESS:
                    assert m["id"] in (7, 8), m
                    if m["id"] == 7:
                        states.append(m["state"])
                        stamps.append(time.monotonic() - t0)
                else:
                    replies[m["id"]] = (ft, m)
        assert replies[8][0] == 0x83 and replies[8][1]["status"] == 0, replies[8]
        assert replies[9][0] == 0x83 and replies[9][1]["cached"] is True, replies[9]
        while True:
            ft, body = c.recv_frame(progress=True)
            m = mp_unpack(body)
            if ft != PROGRESS:
                break
            assert m["id"] == 7 and m["state"] in ("queued", "running"), m
            states.append(m["state"])
            stamps.append(time.monotonic() - t0)
        done = time.monotonic() - t0
        assert ft == 0x83 and m["id"] == 7 and m["status"] == 0 and b".entry" in m["output"], m
        assert done >= 4, done
        assert len(states) >= 4 and states[-1] == "running", states
        gaps = [b - a for a, b in zip(stamps, stamps[1:])]
        assert max(gaps) < 1.8, gaps
        # A hit: the reply, no progress before it.
        c.send(frame(3, mp_pack({"id": 10, "input": slow, "cpu": "sm_90a"})))
        ft, body = c.recv_frame(progress=True)
        assert ft == 0x83 and mp_unpack(body)["cached"] is True, (ft, body[:100])
        c.close()
    print("     first progress after %.3f s; %d frames over a %.1f s compile (%s); "
          "largest gap %.2f s" % (first, len(states), done, "/".join(sorted(set(states))),
                                   max(gaps)))


# ---- the clients' side -------------------------------------------------

def test_fronts_fall_back_quickly_from_a_stopped_daemon():
    """SIGSTOP: connections still land in the socket's backlog and the
    request in its buffer, and nothing ever comes back."""
    with Daemon(workers=1) as d, tempfile.TemporaryDirectory() as t:
        fr = Fronts(t, d.socket, "stopped")
        os.kill(d.proc.pid, signal.SIGSTOP)
        try:
            times, msg = check_fallbacks(fr, "stopped daemon")
        finally:
            os.kill(d.proc.pid, signal.SIGCONT)
        assert "said nothing" in msg, msg
        d.cli("ping")       # and it serves again once it runs
        # Resumed, the daemon serves what the clients left (they are gone),
        # and the next request itself.
        answers = lambda st: st["hits"] + st["misses"]   # noqa: E731
        before = answers(d.stats())
        r, s, out = fr.llc()
        assert r.returncode == 0 and out == fr.want_llc(), r.stderr
        assert answers(d.stats()) == before + 1
    report("stopped daemon (SIGSTOP)", times, msg)


def test_fronts_fall_back_quickly_from_a_socket_that_never_reads():
    with tempfile.TemporaryDirectory() as t, FakeServer(t, never_read) as srv:
        fr = Fronts(t, srv.path, "deaf")
        times, msg = check_fallbacks(fr, "socket that never reads")
        assert srv.accepted >= len(times), srv.accepted
        assert "said nothing" in msg, msg
        # A request larger than the socket's buffers: its send stalls, and
        # that is silence too.
        big = Fronts(t, srv.path, "deaf_big", ir=small_ir("deaf_big") + b"; " + b"x" * (8 << 20)
                     + b"\n")
        r, s, out = big.llc()
        assert r.returncode == 0 and out == big.want_llc() and s < BOUND_S, (r.stderr, s)
        times["llc, 8 MB request"] = s
    report("socket that accepts and never reads", times, msg)


def test_fronts_fall_back_when_the_daemon_dies_mid_reply():
    with tempfile.TemporaryDirectory() as t:
        with FakeServer(t, half_reply(close=True)) as srv:
            fr = Fronts(t, srv.path, "died")
            times, msg = check_fallbacks(fr, "death mid-reply", silent=False)
            assert "closed the connection" in msg, msg
        report("daemon dies mid-reply", times, msg)
        os.unlink(os.path.join(t, "fake.sock"))
        with FakeServer(t, half_reply(close=False)) as srv:
            fr = Fronts(t, srv.path, "stalled")
            times, msg = check_fallbacks(fr, "silence mid-reply")
            assert "said nothing" in msg, msg
        report("daemon falls silent mid-reply", times, msg)


def test_compile_far_longer_than_the_silence_bound_completes_through_the_daemon():
    """A 20 s compile (the probe build's "slow" worker) with a 3 s silence
    bound: each front gets the daemon's answer, not a fallback (the real
    tools they would fall back on fail here), with the real tools' bytes."""
    secs, silence = 20, 3000
    with Daemon(workers=3, binary=PROBE_DAEMON) as d, tempfile.TemporaryDirectory() as t:
        probe = b"; ptxcache-probe: slow %d\n" % secs
        fr_llc = Fronts(t, d.socket, "slow_llc", silence, ir=probe + small_ir("slow_llc"))
        fr_cli = Fronts(t, d.socket, "slow_cli", silence, ir=probe + small_ir("slow_cli"))
        ptx = None
        if real_ptxas():
            ptx = b"// ptxcache-probe: slow %d\n" % secs + read(corpus(".triton.ptx")[0])
        fr_asm = Fronts(t, d.socket, "slow_asm", silence, ptx=ptx)
        no = {"PTXCACHE_LLC": failing_tool(t, "llc"), "PTXCACHE_PTXAS": failing_tool(t, "ptxas")}
        before = d.stats()
        with ThreadPoolExecutor(3) as ex:
            jobs = {"llc": ex.submit(fr_llc.llc, no), "cli": ex.submit(fr_cli.cli, no)}
            if fr_asm.ptxas:
                jobs["ptxas"] = ex.submit(fr_asm.ptxas_front, no)
            got = {k: f.result() for k, f in jobs.items()}
        r, s_llc, out = got["llc"]
        assert r.returncode == 0 and out == fr_llc.want_llc(), (r.returncode, r.stderr)
        r, s_cli = got["cli"]
        j = json.loads(r.stdout)
        assert r.returncode == 0 and j["status"] == "ok" and j["cached"] is False, r.stdout[:300]
        times = {"llc": s_llc, "cli": s_cli}
        if "ptxas" in got:
            r, s_asm, cubin = got["ptxas"]
            assert r.returncode == 0 and cubin == fr_asm.want_cubin(), (r.returncode, r.stderr)
            times["ptxas"] = s_asm
        for k, s in times.items():
            assert s >= secs, (k, s)        # the job really took that long
        after = d.stats()
        assert after["compiles"] - before["compiles"] == len(times), (before, after)
    print("     %d s compiles, silence bound %.0f s, completed through the daemon: %s" % (
        secs, silence / 1000, ", ".join("%s %.1f s" % kv for kv in times.items())))


def test_silence_setting_and_flag():
    """$PTXCACHE_SILENCE_MS and --silence set the bound (0: none, the
    timeout alone); a bad value is refused."""
    with tempfile.TemporaryDirectory() as t, FakeServer(t, never_read) as srv:
        env = dict(os.environ, PTXCACHE_SOCKET=srv.path)

        def ping(args=(), **e):
            t0 = time.monotonic()
            r = subprocess.run([CLI, *args, "ping"], capture_output=True, timeout=60,
                               env=dict(env, **e))
            return r, time.monotonic() - t0

        r, s1 = ping(PTXCACHE_SILENCE_MS="500")
        assert r.returncode != 0 and b"said nothing for 500 ms" in r.stderr, r.stderr
        r, s2 = ping(["--silence", "0.3"])
        assert r.returncode != 0 and b"said nothing for 300 ms" in r.stderr, r.stderr
        assert 0.5 <= s1 < 5 and 0.3 <= s2 < 5, (s1, s2)    # the bound was waited out
        r, s3 = ping(["--silence", "0", "--timeout", "1.5"])
        assert r.returncode != 0 and b"timed out after 1500 ms" in r.stderr, r.stderr
        assert s3 >= 1.4, s3
        r, _ = ping(["--silence", "soon"])
        assert r.returncode != 0 and b"bad --silence" in r.stderr, r.stderr
    print("     bound 0.5 s: gave up after %.2f s; --silence 0.3: %.2f s; none: the 1.5 s "
          "timeout, %.2f s" % (s1, s2, s3))


C_PROGRAM = r"""
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include "client/ptxcache.h"
/* argv: socket, mode. Pings a daemon that never answers; prints the error. */
int main(int argc, char **argv)
{
	struct ptxcache_opts o;
	char err[256];
	ptxcache_opts_init(&o);
	o.timeout_ms = 1000;
	if (argv[2][0] == 'o')          /* opts: silence 300 ms */
		o.silence_ms = 300;
	if (argv[2][0] == 's')          /* an older, smaller struct: no silence_ms */
		o.size = offsetof(struct ptxcache_opts, silence_ms);
	ptxcache *pc = ptxcache_connect_opts(argv[1], &o, err, sizeof err);
	if (!pc) { printf("connect: %s\n", err); return 3; }
	if (argv[2][0] == 'z')          /* set_silence(0): the timeout alone */
		ptxcache_set_silence(pc, 0);
	int r = ptxcache_ping(pc);
	printf("%d %s\n", r, ptxcache_errmsg(pc));
	ptxcache_close(pc);
	return 0;
}
"""


def test_library_silence_api():
    """ptxcache_connect_opts() and ptxcache_set_silence(), from C: an
    explicit bound, an older caller's smaller struct (the environment's
    bound applies), and no bound (the timeout)."""
    with tempfile.TemporaryDirectory() as t, FakeServer(t, never_read) as srv:
        exe = c_client(C_PROGRAM, t)
        got = {}
        for mode in ("opts", "small", "zero"):
            t0 = time.monotonic()
            r = subprocess.run([exe, srv.path, mode], capture_output=True, text=True, timeout=60,
                               env=dict(os.environ, PTXCACHE_SILENCE_MS="600"))
            got[mode] = (time.monotonic() - t0, r.stdout.strip())
        assert "-1 ptxcached said nothing for 300 ms" in got["opts"][1], got
        assert "-1 ptxcached said nothing for 600 ms" in got["small"][1], got
        assert "-1 timed out after 1000 ms" in got["zero"][1], got
        assert got["opts"][0] >= 0.3 and got["small"][0] >= 0.6 and got["zero"][0] >= 1.0, got
    print("     " + "; ".join("%s: %.2f s" % (k, v[0]) for k, v in got.items()))


def test_artifact_lease_wait_follows_the_same_rule():
    """A get that waits for another client's put is kept alive by the
    daemon's "waiting" progress frames far past the silence bound, and
    gets the value; the same wait on a daemon that stops gives up within
    the bound."""
    with Daemon(workers=1) as d, tempfile.TemporaryDirectory() as t:
        env = dict(os.environ, PTXCACHE_SOCKET=d.socket, PTXCACHE_SILENCE_MS=str(SILENCE_MS))
        producer = Raw(d.socket, timeout=30)

        def lease(key):
            producer.send(frame(10, mp_pack({"id": 1, "ns": "triton", "key": key, "lease": True})))
            ft, body = producer.recv_frame()
            m = mp_unpack(body)
            assert ft == 0x8a and not m["found"] and m["lease"], m
            return m["lease"]

        def waiter(key):
            return subprocess.Popen([CLI, "artifact", "get", "triton", key, "--wait", "60",
                                     "-o", os.path.join(t, key)], env=env,
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE)

        tok = lease("alive")
        t0 = time.monotonic()
        w = waiter("alive")
        time.sleep(3 * SILENCE_MS / 1000)
        assert w.poll() is None, w.communicate()
        producer.send(frame(11, mp_pack({"id": 2, "ns": "triton", "key": "alive",
                                          "value": b"the value", "lease": tok})))
        assert producer.recv_frame()[0] == 0x8b
        out, err = w.communicate(timeout=60)
        alive = time.monotonic() - t0
        assert w.returncode == 0 and read(os.path.join(t, "alive")) == b"the value", err

        lease("stopped")
        w = waiter("stopped")
        time.sleep(0.5)
        t0 = time.monotonic()
        os.kill(d.proc.pid, signal.SIGSTOP)
        try:
            out, err = w.communicate(timeout=BOUND_S)
        finally:
            os.kill(d.proc.pid, signal.SIGCONT)
        stopped = time.monotonic() - t0
        assert w.returncode == 2 and b"said nothing" in err, (w.returncode, err)
        producer.close()
    print("     a get waiting on a lease: alive after %.1f s (bound %.1f s), got the value; "
          "daemon stopped meanwhile: gave up after %.2f s" % (alive, SILENCE_MS / 1000, stopped))
