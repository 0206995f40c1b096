# SPDX-License-Identifier: Apache-2.0
"""Shared pieces of ptxcache's black-box tests: the real daemon on a private
socket in a temp dir, the real CLI, and a raw-protocol client for sending
what a well-behaved client never would.

A test is a function named test_* in a tests/test_*.py module; it gets no
arguments, raises AssertionError (or anything) to fail, and may raise Skip.
"""
import atexit
import json
import os
import shutil
import signal
import socket
import struct
import subprocess
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# PTXCACHE_BUILD picks another build tree (make check-asan: build-asan).
BUILD = os.path.join(ROOT, os.environ.get("PTXCACHE_BUILD", "build"))
DAEMON = os.path.join(BUILD, "ptxcached")
# The test-only daemon whose workers run daemon/probe.c's attacks.
PROBE_DAEMON = os.path.join(BUILD, "ptxcached-probe")
CLI = os.path.join(BUILD, "ptxcache")
# The project's kernels (tests/corpus/), unpacked by `make corpus`.
TRITON = os.environ.get("PTXCACHE_CORPUS", os.path.join(BUILD, "corpus", "triton"))
# Inputs the tests wrote themselves (tests/inputs/).
INPUTS = os.path.join(ROOT, "tests", "inputs")
LLVM_BIN = os.environ.get("LLVM_BIN", "/usr/lib/llvm-22/bin")
LLC = os.path.join(LLVM_BIN, "llc")
TRITON_FLAGS = ["-O3", "-mtriple=nvptx64-nvidia-cuda", "-mcpu=sm_90a", "-mattr=+ptx90"]


class Skip(Exception):
    pass


# A client that finds no daemon starts one of the user's own (client/autostart.c):
# never from the suite's own processes, on this machine's real sockets and
# caches. tests/test_wheel.py turns it on for the processes it means it for.
os.environ["PTXCACHE_AUTOSTART"] = "0"


# make check-asan: binaries built with ASan and UBSan. Daemons then stop
# with SIGTERM, and their logs are searched for sanitizer reports.
SANITIZED = bool(os.environ.get("PTXCACHE_SANITIZED"))
SANITIZER_MARKS = ("ERROR: AddressSanitizer", "ERROR: LeakSanitizer", "runtime error:",
                   "SUMMARY: UndefinedBehaviorSanitizer")


def sanitizer_report(text):
    """The sanitizer report in a log, or None."""
    for m in SANITIZER_MARKS:
        i = text.find(m)
        if i >= 0:
            return text[max(0, i - 200):i + 4000]
    return None


def status_kb(pid, field):
    """A field of /proc/PID/status in KiB (VmRSS, VmHWM)."""
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise AssertionError("no %s in /proc/%d/status" % (field, pid))


def slow_disk_env(log, sync_ms=0, unlink_ms=0, fail_sync=False):
    """The daemon's environment for a slow fsync of a put's temporary file,
    a slow unlink of a blob file, and (fail_sync) a failing first fsync of
    each put's temporary file (tests/tools/slowsync.c: no test machine has
    a slow or failing disk for real); what was done goes to log."""
    shim = os.path.join(BUILD, "slowsync.so")
    if not os.path.exists(shim):
        raise Skip("no %s (make all builds it)" % shim)
    env = {"LD_PRELOAD": shim, "SLOWSYNC_LOG": log}
    if sync_ms:
        env.update(SLOWSYNC_MATCH="/.tmp-spool", SLOWSYNC_MS=str(sync_ms))
    if unlink_ms:
        env.update(SLOWUNLINK_MATCH="/blobs/", SLOWUNLINK_MS=str(unlink_ms))
    if fail_sync:
        env["FAILSYNC_MATCH"] = "/.tmp-spool"
    if SANITIZED:       # the shim comes before the sanitizer's runtime
        env["ASAN_OPTIONS"] = os.environ.get("ASAN_OPTIONS", "") + ":verify_asan_link_order=0"
    return env


SMALL_IR = """target triple = "nvptx64-nvidia-cuda"
define ptx_kernel void @KERNEL(ptr addrspace(1) %a, ptr addrspace(1) %b, float %x) {
  %v = load float, ptr addrspace(1) %a
  %w = fadd float %v, %x
  store float %w, ptr addrspace(1) %b
  ret void
}
"""


def c_client(source, where):
    """Build a C program on libptxcache.a (as the build tree's tests do:
    sanitized under make check-asan) in the directory where; its path."""
    src, exe = os.path.join(where, "client.c"), os.path.join(where, "client")
    with open(src, "w") as f:
        f.write(source)
    san = ["-fsanitize=address,undefined"] if SANITIZED else []
    r = subprocess.run(["cc", *san, "-I", ROOT, "-o", exe, src,
                        os.path.join(BUILD, "libptxcache.a"), "-lmsgpackc"],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    return exe


def small_ir(tag):
    """A small kernel of its own per tag, so tests do not share cache entries."""
    return SMALL_IR.replace("@KERNEL", "@k_" + tag).encode()


_OTHERS_CLI = []


def cli_for_others():
    """A copy of the CLI that any user can run: the build tree may sit in a
    directory only its owner can enter (a home, a mktemp -d), and tests run
    clients as other users."""
    if not _OTHERS_CLI:
        d = tempfile.mkdtemp(prefix="ptxcache-cli-")
        atexit.register(shutil.rmtree, d, True)
        os.chmod(d, 0o755)
        p = os.path.join(d, "ptxcache")
        shutil.copy(CLI, p)
        os.chmod(p, 0o755)
        _OTHERS_CLI.append(p)
    return _OTHERS_CLI[0]


def corpus(suffix):
    """The corpus files ending in suffix, sorted. The corpus is part of the
    repository: missing, it is a broken build tree, not a reason to skip."""
    if not os.path.isdir(TRITON):
        raise AssertionError("corpus not unpacked at %s: run 'make corpus'" % TRITON)
    return sorted(os.path.join(TRITON, f) for f in os.listdir(TRITON) if f.endswith(suffix))


def triton_kernels():
    return corpus(".ll")


def corpus_third(items):
    """Every third of items (kernels, command lines: spread over the whole
    corpus), or all of them with PTXCACHE_CORPUS_FULL=1. The corpus-wide
    differential tests take a third in make test and make check-asan: the
    whole corpus cost those three tests 204 s of make test's 1,237. Run
    them whole when codegen, the keys or the cubin path change."""
    return items if os.environ.get("PTXCACHE_CORPUS_FULL") else items[::3]


def input_path(name):
    return os.path.join(INPUTS, name)


class Daemon:
    """ptxcached on a private socket and cache dir; stop() kills it."""

    def __init__(self, workers=2, cache_dir=None, extra=(), env=None, wrap=(), binary=DAEMON):
        """wrap: a command that execs the daemon (its arguments follow), e.g.
        to run it in a mount namespace of its own."""
        self.tmp = tempfile.mkdtemp(prefix="ptxcache-test-")
        self.socket = os.path.join(self.tmp, "run", "ptxcached.sock")
        self.cache_dir = cache_dir or os.path.join(self.tmp, "cache")
        self.args = list(wrap) + [binary, "--socket", self.socket, "--cache-dir", self.cache_dir,
                                  "--workers", str(workers), "--log-level", "warning"] + list(extra)
        self.env = dict(os.environ, **(env or {}))
        self.proc = None
        self.log_path = os.path.join(self.tmp, "daemon.log")
        self.start()

    def start(self, wait=True):
        self.log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(self.args, stdout=self.log, stderr=self.log, env=self.env)
        if wait:
            self.wait_ready()
        return self

    def wait_ready(self, timeout=60):
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError("daemon exited with %s:\n%s" % (self.proc.returncode, self.logtext()))
            r = self.cli("ping", check=False, timeout=10)
            if r.returncode == 0:
                return
            time.sleep(0.05)
        raise AssertionError("daemon did not answer within %d s" % timeout)

    def logtext(self):
        with open(self.log_path, "rb") as f:
            return f.read().decode(errors="replace")

    def cli(self, *args, check=True, input=None, timeout=300, env=None):
        e = dict(os.environ, PTXCACHE_SOCKET=self.socket, **(env or {}))
        r = subprocess.run([CLI] + list(args), input=input, capture_output=True,
                           timeout=timeout, env=e)
        if check and r.returncode != 0:
            raise AssertionError("ptxcache %s failed (%d): %s" % (" ".join(args), r.returncode,
                                                                   r.stderr.decode(errors="replace")))
        return r

    def stats(self):
        return json.loads(self.cli("stats", "--json").stdout)

    def wait_stats(self, pred, what, limit=60):
        """The first stats for which pred holds, polled; fails after limit s
        naming what never happened."""
        deadline = time.time() + limit
        while True:
            s = self.stats()
            if pred(s):
                return s
            assert time.time() < deadline, "%s never happened: %s" % (what, s)
            time.sleep(0.01)

    def workers(self, background=False):
        """Pids of the daemon's worker processes, once all have started;
        background: its background (confirmation) workers instead, named
        ptxcached-confirm (daemon/worker_spawn.c)."""
        deadline = time.time() + 60
        while self.stats()["workers_ready"] < self.stats()["workers"]:
            assert time.time() < deadline, "workers did not start"
            time.sleep(0.02)
        while True:
            out = subprocess.run(["pgrep", "-P", str(self.proc.pid)], capture_output=True, text=True)
            pids, spawning = [], False
            for p in out.stdout.split():
                try:
                    with open("/proc/%s/cmdline" % p, "rb") as f:
                        argv = f.read().split(b"\0")
                except OSError:
                    continue        # gone meanwhile
                # A child between its spawn and its exec still has the
                # master's command line: which kind it is, its exec says.
                if argv[1:2] != [b"--worker"]:
                    spawning = True
                elif (argv[0] == b"ptxcached-confirm") == background:
                    pids.append(int(p))
            if not spawning:
                return pids
            assert time.time() < deadline, "a worker never got to its exec"
            time.sleep(0.01)

    def stop(self, sig=signal.SIGTERM):
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self.proc:
            self.log.close()
        return self.proc.returncode if self.proc else None

    def cleanup(self):
        if SANITIZED:
            self.stop(signal.SIGTERM)   # a normal exit, so LeakSanitizer runs
        self.stop(signal.SIGKILL)
        report = sanitizer_report(self.logtext()) if os.path.exists(self.log_path) else None
        shutil.rmtree(self.tmp, ignore_errors=True)
        if report:
            raise AssertionError("sanitizer report from the daemon:\n" + report)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.cleanup()


def llc(args, input=None):
    return subprocess.run([LLC] + list(args), input=input, capture_output=True, timeout=120)


# ---- raw protocol ------------------------------------------------------

def mp_pack(obj):
    """A tiny msgpack encoder for tests (maps, arrays, str, bytes, ints, bools)."""
    if obj is None:
        return b"\xc0"
    if obj is True:
        return b"\xc3"
    if obj is False:
        return b"\xc2"
    if isinstance(obj, int):
        if 0 <= obj < 128:
            return bytes([obj])
        if obj >= 0:
            return b"\xcf" + struct.pack(">Q", obj)
        return b"\xd3" + struct.pack(">q", obj)
    if isinstance(obj, str):
        b = obj.encode()
        return b"\xdb" + struct.pack(">I", len(b)) + b
    if isinstance(obj, (bytes, bytearray)):
        return b"\xc6" + struct.pack(">I", len(obj)) + bytes(obj)
    if isinstance(obj, (list, tuple)):
        return b"\xdd" + struct.pack(">I", len(obj)) + b"".join(mp_pack(x) for x in obj)
    if isinstance(obj, dict):
        return b"\xdf" + struct.pack(">I", len(obj)) + b"".join(
            mp_pack(k) + mp_pack(v) for k, v in obj.items())
    raise TypeError(obj)


def frame(ftype, body, version=1, magic=b"PX"):
    return magic + bytes([version, ftype]) + struct.pack(">I", len(body)) + body


# The daemon's progress frame: a request that waits (PROTOCOL.md).
PROGRESS = 0xFE


class Raw:
    """A raw connection to the daemon's socket."""

    def __init__(self, path, timeout=10):
        self.progress = 0
        self.s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.s.settimeout(timeout)
        self.s.connect(path)

    def send(self, data):
        self.s.sendall(data)

    def recv_frame(self, progress=False):
        """(type, body bytes), or None if the daemon closed the connection.
        Progress frames (type 0xfe: a request still waits) are skipped and
        counted in self.progress, unless progress is true."""
        while True:
            hdr = self._read(8)
            if hdr is None:
                return None
            assert hdr[:2] == b"PX", hdr
            n = struct.unpack(">I", hdr[4:8])[0]
            body = self._read(n)
            if hdr[3] == PROGRESS and not progress and body is not None:
                self.progress += 1
                continue
            return hdr[3], body

    def _read(self, n):
        out = bytearray(n)
        view, got = memoryview(out), 0
        while got < n:
            try:
                k = self.s.recv_into(view[got:], n - got)
            except ConnectionResetError:
                return None
            if not k:
                return None
            got += k
        return bytes(out)

    def closed(self):
        """True if the daemon closes the connection (reads to EOF)."""
        try:
            while True:
                c = self.s.recv(65536)
                if not c:
                    return True
        except (ConnectionResetError, BrokenPipeError):
            return True
        except socket.timeout:
            return False

    def close(self):
        self.s.close()


def mp_unpack(data):
    """A tiny msgpack decoder for tests: the whole of data as one object
    (maps, arrays, str, bin, ints, bools, nil, floats)."""
    def one(p):
        c = data[p]
        p += 1
        if c <= 0x7f:
            return c, p
        if c >= 0xe0:
            return c - 0x100, p
        if 0x80 <= c <= 0x8f:
            return mapn(p, c & 0x0f)
        if 0x90 <= c <= 0x9f:
            return arrn(p, c & 0x0f)
        if 0xa0 <= c <= 0xbf:
            n = c & 0x1f
            return data[p:p + n].decode(errors="replace"), p + n
        if c == 0xc0:
            return None, p
        if c in (0xc2, 0xc3):
            return c == 0xc3, p
        if c in (0xc4, 0xc5, 0xc6, 0xd9, 0xda, 0xdb):
            w = {0xc4: 1, 0xc5: 2, 0xc6: 4, 0xd9: 1, 0xda: 2, 0xdb: 4}[c]
            n = int.from_bytes(data[p:p + w], "big")
            p += w
            b = bytes(data[p:p + n])
            return (b if c <= 0xc6 else b.decode(errors="replace")), p + n
        if c in (0xcc, 0xcd, 0xce, 0xcf):
            w = 1 << (c - 0xcc)
            return int.from_bytes(data[p:p + w], "big"), p + w
        if c in (0xd0, 0xd1, 0xd2, 0xd3):
            w = 1 << (c - 0xd0)
            return int.from_bytes(data[p:p + w], "big", signed=True), p + w
        if c == 0xca:
            return struct.unpack(">f", data[p:p + 4])[0], p + 4
        if c == 0xcb:
            return struct.unpack(">d", data[p:p + 8])[0], p + 8
        if c in (0xdc, 0xdd):
            w = 2 if c == 0xdc else 4
            return arrn(p + w, int.from_bytes(data[p:p + w], "big"))
        if c in (0xde, 0xdf):
            w = 2 if c == 0xde else 4
            return mapn(p + w, int.from_bytes(data[p:p + w], "big"))
        raise ValueError("msgpack byte 0x%02x" % c)

    def arrn(p, n):
        out = []
        for _ in range(n):
            v, p = one(p)
            out.append(v)
        return out, p

    def mapn(p, n):
        out = {}
        for _ in range(n):
            k, p = one(p)
            v, p = one(p)
            out[k] = v
        return out, p

    v, end = one(0)
    if end != len(data):
        raise ValueError("trailing bytes")
    return v
