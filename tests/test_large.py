# SPDX-License-Identifier: Apache-2.0
"""Large values (daemon/store_blobs.c, store_put.c, store.c): artifacts of 256 KiB and more
live in files beside the database and are answered from them, inline
(sendfile) or as the file's descriptor (SCM_RIGHTS) to a client that asks.
A large put's value, sent last, goes from the socket to its file as it
arrives (conn.c's spooling), never whole in the daemon's memory. Through
the real daemon, real files, real uids, a real tmpfs and real SIGKILLs."""
import json
import os
import random
import resource
import selectors
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import threading
import time

from harness import SANITIZED, Daemon, Raw, ROOT, Skip, c_client, frame, mp_pack, mp_unpack, slow_disk_env
from sysutil import cli_as, make_reachable, setpriv, tmpfs

sys.path.insert(0, os.path.join(ROOT, "python"))
from ptxcache import Client, ServerError  # noqa: E402
from ptxcache.wire import frame_parts, pack  # noqa: E402

STATS, GET, PUT, PROGRESS, ERROR = 4, 10, 11, 0xfe, 0xff
B = 65534               # nobody: the second user
MB = 1 << 20


class FdClient:
    """A connection that reads replies with recvmsg, keeping the
    descriptors they bring (the caller closes them, or never does)."""

    def __init__(self, path):
        self.s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.s.settimeout(60)
        self.s.connect(path)
        self.buf = bytearray()
        self.fds = []
        self.next_id = 0

    def _fill(self):
        data, anc, flags, _ = self.s.recvmsg(1 << 20, socket.CMSG_SPACE(16))
        assert not flags & socket.MSG_CTRUNC
        for level, kind, raw in anc:
            assert (level, kind) == (socket.SOL_SOCKET, socket.SCM_RIGHTS)
            n = len(raw) // 4
            assert n == 1, "one descriptor per reply"
            self.fds.append(int.from_bytes(raw[:4], "little"))
        assert data, "the daemon closed the connection"
        self.buf += data

    def call(self, ftype, **fields):
        self.send(ftype, **fields)
        return self.reply()

    def send(self, ftype, **fields):
        self.next_id += 1
        self.s.sendall(frame(ftype, mp_pack(dict(id=self.next_id, **fields))))

    def reply(self):
        while True:
            while len(self.buf) < 8:
                self._fill()
            n = int.from_bytes(self.buf[4:8], "big")
            while len(self.buf) < 8 + n:
                self._fill()
            t, body = self.buf[3], mp_unpack(bytes(self.buf[8:8 + n]))
            del self.buf[:8 + n]
            if t != PROGRESS:
                fd = self.fds.pop(0) if body.get("fd") is True else None
                return t, body, fd

    def close(self):
        self.s.close()


def blob_files(d):
    top = os.path.join(d.cache_dir, "blobs")
    out = []
    for sub in sorted(os.listdir(top)):
        p = os.path.join(top, sub)
        if os.path.isdir(p):
            out += [os.path.join(p, f) for f in sorted(os.listdir(p))]
        else:
            out.append(p)
    return out


def value(n, seed=0):
    """Half text, half random bytes, as a real graph or kernel would be."""
    r = random.Random(seed)
    text = (b"def forward(self, x):\n    return torch.ops.aten.mm(x, self.w)\n" * (n // 120 + 1))
    return text[:n // 2] + r.randbytes(n - n // 2)


def test_a_large_value_is_a_file_and_comes_back_inline_and_as_its_descriptor():
    v = value(3 * MB)
    with Daemon(workers=1) as d:
        with Client(d.socket) as c:
            assert c.artifact_put("inductor-fx", "g", v)
            assert c.artifact_put("inductor-fx", "small", b"x" * 1000)
        # One file: the large value, raw, read-only; the small one in its row.
        files = blob_files(d)
        assert len(files) == 1, files
        st = os.stat(files[0])
        assert stat.S_IMODE(st.st_mode) == 0o400 and st.st_size == len(v)
        with open(files[0], "rb") as f:
            assert f.read() == v
        assert stat.S_IMODE(os.stat(os.path.dirname(files[0])).st_mode) == 0o700
        assert stat.S_IMODE(os.stat(os.path.join(d.cache_dir, "blobs")).st_mode) == 0o700
        c = FdClient(d.socket)
        t, body, fd = c.call(GET, ns="inductor-fx", key="g", fd=True)
        assert t == GET | 0x80 and body["found"] and body["value_len"] == len(v), body
        assert "value" not in body and fd is not None
        # Read-only, a regular file, its own offset, the value's bytes.
        import fcntl
        assert fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_ACCMODE == os.O_RDONLY
        assert stat.S_ISREG(os.fstat(fd).st_mode)
        assert os.read(fd, len(v) + 1) == v
        os.close(fd)
        # Inline to a get that did not ask, and a small value inline always.
        t, body, fd = c.call(GET, ns="inductor-fx", key="g")
        assert fd is None and body["value"] == v
        t, body, fd = c.call(GET, ns="inductor-fx", key="small", fd=True)
        assert fd is None and body["value"] == b"x" * 1000
        c.close()
        s = d.stats()
        assert s["artifact_fd_hits"] == 1 and s["artifact_file_hits"] == 1, s
        # Both clients: Python reads it, libptxcache (the CLI) maps it.
        with Client(d.socket) as py:
            assert py.artifact_get("inductor-fx", "g").value == v
        assert d.cli("artifact", "get", "inductor-fx", "g").stdout == v
        assert d.stats()["artifact_fd_hits"] == 3
        # A restart serves it again, from the same file.
        d.stop()
        d.start()
        assert blob_files(d) == files
        assert d.cli("artifact", "get", "inductor-fx", "g").stdout == v
        assert d.cli("verify").returncode == 0


def test_verify_removes_and_reports_blob_files_no_entry_names_for_the_admin_alone():
    v = value(MB, 4)
    with Daemon(workers=1, extra=["--allow-users", str(B)]) as d:
        with Client(d.socket) as c:
            assert c.artifact_put("t", "k", v)
        [kept] = blob_files(d)
        top = os.path.join(d.cache_dir, "blobs")

        def plant(key_hex):
            """A file of ours by its name that no row names (a failed
            unlink leaves one)."""
            os.makedirs(os.path.join(top, key_hex[:2]), exist_ok=True)
            path = os.path.join(top, key_hex[:2], key_hex + "-" + "0123456789abcdef")
            shutil.copy(kept, path)
            os.chmod(path, 0o400)
            return path
        orphan = plant("ab" * 32)
        spool = os.path.join(top, ".tmp-spool-in-progress")    # a put under way
        with open(spool, "wb") as f:
            f.write(b"x" * 1000)
        if os.geteuid() == 0:
            # Another uid's verify covers its own entries: it leaves the file.
            make_reachable(d.socket)
            r = cli_as(d.socket, B, B, "verify")
            assert r.returncode == 0, (r.stdout, r.stderr)
            assert os.path.exists(orphan)
        r = d.cli("verify", check=False)
        assert r.returncode == 1, (r.stdout, r.stderr)
        out = r.stdout.decode()
        assert os.path.relpath(orphan, top) in out and "no entry names it; removed" in out, out
        assert not os.path.exists(orphan)
        assert os.path.exists(spool) and os.path.exists(kept)
        with Client(d.socket) as c:
            assert c.artifact_get("t", "k").value == v
        assert d.cli("verify").returncode == 0
        os.unlink(spool)


def _damage(path, how):
    os.chmod(path, 0o600)
    with open(path, "r+b") as f:
        if how == "flip":
            f.seek(os.path.getsize(path) // 2)
            b = f.read(1)
            f.seek(-1, 1)
            f.write(bytes([b[0] ^ 0x40]))
        elif how == "grow":
            f.seek(0, os.SEEK_END)
            f.write(b"x")
        else:
            f.truncate(os.path.getsize(path) - 1)
    os.chmod(path, 0o400)


DAMAGES = ("flip", "truncate", "flip", "grow")


def test_a_damaged_blob_file_is_a_miss_counted_never_served_and_dropped():
    """A blob file changed in place after its hash was remembered (its
    hash is taken again), one shorter or longer than its row says (of the
    wrong size, whatever its first bytes): each a miss, counted, dropped."""
    with Daemon(workers=1) as d:
        with Client(d.socket) as c:
            for i, how in enumerate(DAMAGES):
                v = value(MB, i)
                assert c.artifact_put("t", "k%d" % i, v)
                # Served once, so a remembered hash would be there to trust.
                assert c.artifact_get("t", "k%d" % i).value == v
            # Until each get is answered from a remembered hash (the file
            # settled: a tick old, or two seconds where times are whole).
            for i in range(len(DAMAGES)):
                _until(lambda: _hash_remembered(d, c, "k%d" % i), "k%d's hash remembered" % i)
            files = {f: None for f in blob_files(d)}
            assert len(files) == len(DAMAGES)
        names = sorted(files)
        ls = json.loads(d.cli("ls", "--namespace", "t", "--json").stdout)
        by_key = {e["components"]["key"]: e["key"] for e in ls}
        paths = {i: next(p for p in names if os.path.basename(p).startswith(by_key["k%d" % i]))
                 for i in range(len(DAMAGES))}
        for i, how in enumerate(DAMAGES):
            _damage(paths[i], how)
        r = d.cli("verify", check=False)
        assert r.returncode != 0 and r.stdout.count(b"entry ") >= len(DAMAGES), r.stdout
        # By descriptor, inline, and through the Python client: each a miss.
        c = FdClient(d.socket)
        t, body, fd = c.call(GET, ns="t", key="k0", fd=True)
        assert body["found"] is False and fd is None, body
        t, body, fd = c.call(GET, ns="t", key="k1")
        assert body["found"] is False and fd is None, body
        t, body, fd = c.call(GET, ns="t", key="k3", fd=True)
        assert body["found"] is False and fd is None, body
        c.close()
        with Client(d.socket) as py:
            assert not py.artifact_get("t", "k2").found
        s = d.stats()
        assert s["corrupt_blobs"] == len(DAMAGES), s
        # The entries are gone, and their files (unlinked off the loop).
        _until(lambda: blob_files(d) == [], "the damaged files' unlink")
        assert json.loads(d.cli("ls", "--namespace", "t", "--json").stdout) == []
        assert "corrupt" in d.logtext()


def test_symlinks_planted_in_the_blob_directory_are_never_followed():
    """A value's file replaced by a symlink to a copy of its very bytes
    (which would pass every other check) is a damaged entry: a miss,
    counted and dropped, the link removed and the copy it points to left
    as it was. A subdirectory replaced by a symlink to a directory of
    someone's files is not swept: verify and the sweep at a restart
    remove none of them."""
    v = value(MB, 7)
    with Daemon(workers=1) as d, tempfile.TemporaryDirectory() as elsewhere:
        with Client(d.socket) as c:
            assert c.artifact_put("t", "k", v)
        [path] = blob_files(d)
        copy = os.path.join(elsewhere, "copy")
        shutil.copy(path, copy)
        os.unlink(path)
        os.symlink(copy, path)
        c = FdClient(d.socket)
        t, body, fd = c.call(GET, ns="t", key="k", fd=True)
        assert t == GET | 0x80 and body["found"] is False and fd is None, body
        c.close()
        assert d.stats()["corrupt_blobs"] == 1
        _until(lambda: not os.path.lexists(path), "the link's unlink")
        with open(copy, "rb") as f:
            assert f.read() == v
        # A subdirectory that is a link: its files no entry names are not ours.
        theirs = os.path.join(elsewhere, "theirs")
        os.mkdir(theirs)
        precious = os.path.join(theirs, "precious")
        with open(precious, "wb") as f:
            f.write(b"not the daemon's")
        os.symlink(theirs, os.path.join(d.cache_dir, "blobs", "ab"))
        d.cli("verify", check=False)
        d.stop()
        d.start()
        assert d.cli("artifact", "get", "t", "k", check=False).returncode == 1
        assert os.listdir(theirs) == ["precious"]


def _rchar(pid):
    """Bytes the process has read through read() and its kin, page cache
    or not."""
    with open("/proc/%d/io" % pid) as f:
        return next(int(l.split()[1]) for l in f if l.startswith("rchar:"))


def _hash_remembered(d, c, key):
    """Whether a get of t/key (1 MiB, by descriptor) is answered without
    the daemon reading its file to hash it."""
    before = _rchar(d.proc.pid)
    assert c.artifact_get("t", key).found
    return _rchar(d.proc.pid) - before < MB // 2


def test_a_value_put_a_moment_ago_is_hashed_by_its_gets_for_a_tick_not_a_second():
    """A blob file's hash is remembered once a get's hash started a
    timestamp tick (50 ms, sub-second times) after the file's change time:
    a get soon after the put reads the file; the one after it does not."""
    v = value(8 * MB, 3)
    with Daemon(workers=1) as d, Client(d.socket) as c:
        for attempt in range(5):
            key = "fresh%d" % attempt
            t0 = time.monotonic()
            assert c.artifact_put("t", key, v)
            time.sleep(0.1)     # a tick and more: this get's hash is remembered
            assert c.artifact_get("t", key).value == v
            before = _rchar(d.proc.pid)
            assert c.artifact_get("t", key).value == v
            read = _rchar(d.proc.pid) - before
            if time.monotonic() - t0 < 1.0:     # else the second's rule would trust it too
                assert read < MB, "the daemon read %d bytes: the file hashed again" % read
                return
        raise AssertionError("each attempt took a second or more: nothing shown")


def test_the_waiters_of_a_put_are_answered_from_one_hash_of_its_file():
    """The waiters of a put find its file a moment old, too fresh for the
    table of hashed files: answered together, they share one hash of it
    (blobs_together()) instead of reading it once each."""
    v, n = value(8 * MB, 4), 6
    with Daemon(workers=1) as d, Client(d.socket) as producer:
        token = producer.artifact_get("t", "k", lease=True).lease
        waiters = [Client(d.socket) for _ in range(n)]
        got = {}
        threads = [threading.Thread(target=lambda i=i: got.update(
            {i: waiters[i].artifact_get("t", "k", wait_ms=60000)})) for i in range(n)]
        for t in threads:
            t.start()
        d.wait_stats(lambda s: s["artifact_waiting"] == n, "the gets' waits")
        before = _rchar(d.proc.pid)
        assert producer.artifact_put("t", "k", v, lease=token)
        for t in threads:
            t.join()
        read = _rchar(d.proc.pid) - before
        assert [got[i].value == v for i in range(n)] == [True] * n
        for c in waiters:
            c.close()
        # One hash of the file (the put's bytes come by recvmsg, which
        # rchar does not count): 8.4 MB here, 50.3 MB one hash a waiter.
        assert read < 1.5 * len(v), "the daemon read %d bytes for %d waiters of a put of %d" % (
            read, n, len(v))


def _used(mnt):
    v = os.statvfs(mnt)
    return (v.f_blocks - v.f_bfree) * v.f_frsize


def test_a_value_held_while_evicted_or_purged_keeps_its_bytes_and_its_space_comes_back():
    """Descriptors a client holds: one entry evicted, the other purged;
    their files unlinked, whole for the client that holds them, their
    blocks back once it closes them."""
    with tmpfs(256 * MB) as mnt:
        with Daemon(workers=1, cache_dir=os.path.join(mnt, "cache")) as d:
            v, w = value(16 * MB, 1), value(16 * MB, 2)
            with Client(d.socket) as c:
                assert c.artifact_put("t", "a", v)
                assert c.artifact_put("u", "b", w)
            fc = FdClient(d.socket)
            _, body, fa = fc.call(GET, ns="t", key="a", fd=True)
            _, body, fb = fc.call(GET, ns="u", key="b", fd=True)
            assert fa is not None and fb is not None
            before = _used(mnt)
            assert d.cli("evict", "--namespace", "t", "--json").returncode == 0
            _until(lambda: len(blob_files(d)) == 1, "the evicted file's unlink (off the loop)")
            assert d.cli("purge", "--json").returncode == 0
            _until(lambda: blob_files(d) == [], "the purged file's unlink (off the loop)")
            # Gone from the cache, still whole for the client that holds it.
            assert os.fstat(fa).st_nlink == 0 and os.fstat(fb).st_nlink == 0
            assert os.pread(fa, len(v), 0) == v and os.pread(fb, len(w), 0) == w
            assert _used(mnt) > before - 4 * MB, "the held files keep their blocks"
            os.close(fa)
            os.close(fb)
            assert _used(mnt) < before - 28 * MB, (before, _used(mnt))
            fc.close()


MAPPED_PROGRAM = r"""
#include <stdio.h>
#include "client/ptxcache.h"
/* argv: socket, out. Gets t/a and u/b through libptxcache (values of 32
 * MiB and more: mapped from the descriptor's file), prints the line of
 * /proc/self/maps that holds each value, waits for a line on stdin, then
 * writes both values, from their mappings, to out. */
int main(int argc, char **argv)
{
	const char *ns[2] = { "t", "u" }, *key[2] = { "a", "b" };
	struct ptxcache_artifact a[2];
	char err[256], line[4096];
	ptxcache *pc = ptxcache_connect(argv[1], 60000, err, sizeof err);
	if (!pc) { printf("connect: %s\n", err); return 3; }
	for (int i = 0; i < 2; i++) {
		if (ptxcache_artifact_get(pc, ns[i], key[i], 0, -1, &a[i]) < 0 || !a[i].found) {
			printf("get: %s\n", ptxcache_errmsg(pc));
			return 3;
		}
		FILE *maps = fopen("/proc/self/maps", "r");
		unsigned long lo, hi, at = (unsigned long)a[i].value;
		while (fgets(line, sizeof line, maps))
			if (sscanf(line, "%lx-%lx", &lo, &hi) == 2 && lo <= at && at < hi)
				fputs(line, stdout);
		fclose(maps);
	}
	fflush(stdout);
	if (!fgets(line, sizeof line, stdin))
		return 3;
	FILE *out = fopen(argv[2], "wb");
	for (int i = 0; i < 2; i++) {
		fwrite(a[i].value, 1, a[i].len, out);
		ptxcache_artifact_free(&a[i]);
	}
	fclose(out);
	ptxcache_close(pc);
	return 0;
}
"""


def test_a_value_libptxcache_mapped_keeps_its_bytes_when_its_entry_is_evicted_and_purged():
    """libptxcache maps a value of 32 MiB and more from the descriptor's
    file, no copy. Its entry evicted (ptxcache evict), another's purged
    (ptxcache purge): their files are unlinked, never truncated, so the
    mappings the client holds still read the exact bytes (a truncated
    file's pages would be gone from them: SIGBUS)."""
    v, w = value(33 * MB, 1), value(34 * MB, 2)
    with tempfile.TemporaryDirectory() as t, Daemon(workers=1) as d:
        with Client(d.socket) as c:
            assert c.artifact_put("t", "a", v)
            assert c.artifact_put("u", "b", w)
        files = blob_files(d)
        exe = c_client(MAPPED_PROGRAM, t)
        out = os.path.join(t, "out")
        p = subprocess.Popen([exe, d.socket, out], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True)
        try:
            maps = [p.stdout.readline() for _ in range(2)]
            # Each value lies in a mapping of its blob file (the mmap path).
            mapped = sorted(m.split()[-1] for m in maps)
            assert mapped == sorted(os.path.realpath(f) for f in files), maps
            assert d.cli("evict", "--namespace", "t", "--json").returncode == 0
            _until(lambda: len(blob_files(d)) == 1, "the evicted file's unlink (off the loop)")
            assert d.cli("purge", "--json").returncode == 0
            _until(lambda: blob_files(d) == [], "the purged file's unlink (off the loop)")
            with Client(d.socket) as c:
                assert not c.artifact_get("t", "a").found and not c.artifact_get("u", "b").found
            p.stdin.write("read\n")
            p.stdin.flush()
            assert p.wait(timeout=60) == 0, p.returncode
        finally:
            if p.poll() is None:
                p.kill()
                p.wait()
        with open(out, "rb") as f:
            assert f.read() == v + w


def test_python_gets_answered_together_each_take_their_own_value_and_descriptor():
    """The Python client reads ahead (a small reply's header and body in
    one read, and what follows them): replies answered together, small
    ones inline, ones of 100 KiB inline (a body longer than a read ahead,
    begun by one), and large ones as descriptors, each reach their own key."""
    keys = ["s0", "l0", "m0", "s1", "l1", "none", "m1", "l2", "s2", "m2", "l3"]
    sizes = {"s": 200, "m": 100 << 10, "l": 300 << 10}
    vals = {k: value(sizes[k[0]] + 4096 * i, seed=i) for i, k in enumerate(keys) if k != "none"}
    with Daemon(workers=1) as d:
        with Client(d.socket) as c:
            for k, v in vals.items():
                assert c.artifact_put("t", k, v)
            for turn in range(20):
                order = keys[turn % len(keys):] + keys[:turn % len(keys)]
                got = c.artifact_get_many("t", order)
                assert [r.value for r in got] == [vals.get(k) for k in order], turn
            c.ping()
        # A descriptor goes with a reply only where nothing is queued
        # before it (conn_send_fd()): at least where a large one is first.
        s = d.stats()
        assert s["artifact_fd_hits"] + s["artifact_fd_fallbacks"] == 20 * 4, s
        assert s["artifact_fd_hits"] >= sum(keys[t % len(keys)][0] == "l" for t in range(20)), s


def test_a_client_that_reads_keeps_getting_descriptors_however_many_it_holds():
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard < 2200:
        raise Skip("needs 2200 descriptors")
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, 2200), hard))
    try:
        v = value(300 << 10)
        with Daemon(workers=1) as d:
            with Client(d.socket) as c:
                assert c.artifact_put("t", "k", v)
            c = FdClient(d.socket)
            held = []
            for i in range(1500):       # read, never closed
                t, body, fd = c.call(GET, ns="t", key="k", fd=True)
                assert body["found"] and fd is not None, (i, body)
                held.append(fd)
            assert os.pread(held[-1], len(v), 0) == v
            s = d.stats()
            assert s["artifact_fd_hits"] == 1500 and s["artifact_fd_fallbacks"] == 0, s
            for fd in held:
                os.close(fd)
            c.close()
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_descriptors_in_flight_are_bounded_per_connection_then_values_go_inline():
    v = value(300 << 10)
    with Daemon(workers=1) as d:
        with Client(d.socket) as c:
            assert c.artifact_put("t", "k", v)
        c = FdClient(d.socket)
        for i in range(100):        # asked for, not read
            c.send(GET, ns="t", key="k", fd=True)
        deadline = time.monotonic() + 30
        while d.stats()["artifact_fd_fallbacks"] == 0:
            assert time.monotonic() < deadline, "the daemon never stopped sending descriptors"
            time.sleep(0.01)
        got = [c.reply() for i in range(100)]
        fds = [fd for t, body, fd in got if fd is not None]
        # The first 64 as descriptors, the 65th inline; then what the
        # daemon answered once this client had read may be either.
        assert [fd is not None for t, body, fd in got[:65]] == [True] * 64 + [False], \
            [fd is not None for t, body, fd in got[:65]]
        for t, body, fd in got:
            assert (os.pread(fd, len(v) + 1, 0) if fd is not None else body["value"]) == v
        # All read: the count starts again, and the daemon serves on.
        t, body, fd = c.call(GET, ns="t", key="k", fd=True)
        assert fd is not None and os.pread(fd, len(v), 0) == v
        for fd in fds + [fd]:
            os.close(fd)
        c.close()


_OUT_OF_FDS = r"""
import os, resource, sys
sys.path.insert(0, sys.argv[2])
from ptxcache import Client, ProtocolError
c = Client(sys.argv[1])
assert len(c.artifact_get("t", "k").value) == int(sys.argv[3])
resource.setrlimit(resource.RLIMIT_NOFILE, (64, 64))
held = []
try:
    while True:
        held.append(os.open("/dev/null", os.O_RDONLY))
except OSError:
    pass
try:
    c.artifact_get("t", "k")
    print("no error")
except ProtocolError as e:
    print(e)
"""


def test_a_client_out_of_descriptors_gets_a_clear_error_and_the_daemon_serves_on():
    v = value(300 << 10)
    with Daemon(workers=1) as d:
        with Client(d.socket) as c:
            assert c.artifact_put("t", "k", v)
        r = subprocess.run([sys.executable, "-c", _OUT_OF_FDS, d.socket,
                            os.path.join(ROOT, "python"), str(len(v))],
                           capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r.stderr
        assert "a descriptor this process could not take (out of descriptors?)" in r.stdout, r.stdout
        with Client(d.socket) as c:
            assert c.artifact_get("t", "k").value == v


_LIB_OUT_OF_FDS = r"""
#include <fcntl.h>
#include <stdio.h>
#include <sys/resource.h>
#include <unistd.h>
#include "client/ptxcache.h"

/* A get of t/k: "found LEN" (the value written to PREFIX.step) or
 * "-1 MESSAGE". */
static void get(ptxcache *pc, const char *prefix, int step)
{
	struct ptxcache_artifact a;
	char path[4096];

	if (ptxcache_artifact_get(pc, "t", "k", 0, -1, &a) < 0) {
		printf("-1 %s\n", ptxcache_errmsg(pc));
		return;
	}
	printf("%s %zu\n", a.found ? "found" : "miss", a.len);
	snprintf(path, sizeof path, "%s.%d", prefix, step);
	FILE *f = fopen(path, "wb");
	if (!f || fwrite(a.value, 1, a.len, f) != a.len || fclose(f))
		printf("cannot write %s\n", path);
	ptxcache_artifact_free(&a);
}

/* argv: the socket, where the values go. */
int main(int argc, char **argv)
{
	char err[256];
	int held[64], n = 0, fd;
	struct rlimit rl = { 64, 64 };

	(void)argc;
	ptxcache *pc = ptxcache_connect(argv[1], 60000, err, sizeof err);
	if (!pc) { printf("connect: %s\n", err); return 3; }
	get(pc, argv[2], 0);
	/* No descriptor left: the next reply's cannot be taken. */
	if (setrlimit(RLIMIT_NOFILE, &rl) < 0) { perror("setrlimit"); return 3; }
	while (n < 64 && (fd = open("/dev/null", O_RDONLY)) >= 0)
		held[n++] = fd;
	get(pc, argv[2], 1);
	while (n)
		close(held[--n]);
	get(pc, argv[2], 2);
	ptxcache_close(pc);
	pc = ptxcache_connect(argv[1], 60000, err, sizeof err);
	if (!pc) { printf("connect: %s\n", err); return 3; }
	get(pc, argv[2], 3);
	ptxcache_close(pc);
	return 0;
}
"""


def test_libptxcache_out_of_descriptors_gets_a_clear_error_then_the_value():
    """libptxcache's get of a value that comes as a descriptor, in a process
    with no descriptor left: -1 with the message that says so (no crash, no
    value, no "malformed reply"). Once descriptors are freed, the same
    handle gets the value whole (the kernel ends the read at the reply
    that carried the descriptor, dropped with it: the stream stays whole),
    and so does a new one."""
    v = value(300 << 10)
    with Daemon(workers=1) as d, tempfile.TemporaryDirectory() as t:
        with Client(d.socket) as c:
            assert c.artifact_put("t", "k", v)
        exe = c_client(_LIB_OUT_OF_FDS, t)
        prefix = os.path.join(t, "value")
        r = subprocess.run([exe, d.socket, prefix], capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, (r.stdout, r.stderr)
        lines = r.stdout.splitlines()
        assert lines == ["found %d" % len(v),
                         "-1 ptxcached sent a descriptor this process could not take "
                         "(out of descriptors?)",
                         "found %d" % len(v), "found %d" % len(v)], r.stdout
        for step in (0, 2, 3):
            with open("%s.%d" % (prefix, step), "rb") as f:
                assert f.read() == v, step
        assert not os.path.exists(prefix + ".1")
        # Each get asked for the descriptor, and the daemon sent it.
        assert d.stats()["artifact_fd_hits"] == 4


def test_a_daemon_out_of_descriptors_pauses_accepting_and_keeps_its_entries():
    # Idle connections take every descriptor the daemon may have: it
    # neither spins on accept() (it pauses, and says so once) nor takes a
    # blob file it cannot open now for a damaged one (the get misses, the
    # entry stays), and it serves the value once descriptors come back.
    v = value(1 * MB)
    with Daemon(workers=1, wrap=["prlimit", "--nofile=64:64", "--"]) as d:
        def until(pred, what):
            for _ in range(300):
                if pred():
                    return
                time.sleep(0.1)
            raise AssertionError("not within 30 s: " + what)
        with Client(d.socket) as c:
            assert c.artifact_put("t", "k", v)
            idle = []
            try:
                for _ in range(80):
                    idle.append(socket.socket(socket.AF_UNIX))
                    idle[-1].connect(d.socket)
                until(lambda: len(os.listdir("/proc/%d/fd" % d.proc.pid)) == 64,
                      "the daemon's descriptors all taken")
                assert c.artifact_get("t", "k").value is None
                time.sleep(1)
                assert c.stats()["corrupt_blobs"] == 0 and len(blob_files(d)) == 1
                log = d.logtext()
                assert log.count("cannot accept connections") == 1, log[-2000:]
                assert "accept() call" not in log, log[-2000:]
            finally:
                for s in idle:
                    s.close()
            until(lambda: c.artifact_get("t", "k").value == v, "the value served again")


_OTHER = r"""
import os, socket, sys
sys.path.insert(0, sys.argv[3])
from test_large import FdClient, GET
c = FdClient(sys.argv[1])
t, body, fd = c.call(GET, ns="t", key="k", fd=True)
out = {"found": body.get("found"), "fd": fd is not None}
if fd is not None:
    out["bytes"] = os.pread(fd, 64, 0).hex()
try:
    os.open(sys.argv[2], os.O_RDONLY)
    out["open"] = "opened"
except OSError as e:
    out["open"] = e.errno
print(repr(out))
"""


def test_no_descriptor_reaches_another_uid_and_no_blob_file_opens_for_it():
    if os.geteuid() != 0:
        raise Skip("needs root to run clients as other users")
    with Daemon(workers=1, extra=["--allow-users", str(B)]) as d:
        make_reachable(d.socket)
        v = value(MB, 7)
        with Client(d.socket) as c:
            assert c.artifact_put("t", "k", v)
        path = blob_files(d)[0]
        # Even with the cache directory opened to others, blobs/ is not.
        os.chmod(d.cache_dir, 0o711)
        here = os.path.dirname(os.path.abspath(__file__))
        script = os.path.join(tempfile.mkdtemp(prefix="ptxcache-other-"), "other.py")
        os.chmod(os.path.dirname(script), 0o755)
        with open(script, "w") as f:
            f.write(_OTHER)
        tests_copy = os.path.join(os.path.dirname(script), "t")
        os.mkdir(tests_copy)
        for name in ("test_large.py", "harness.py", "sysutil.py"):
            shutil.copy(os.path.join(here, name), tests_copy)
        # The checkout may sit where B cannot read (CI's clone is in a 0700
        # directory): the package goes beside the copy, where harness's
        # ROOT points from there.
        shutil.copytree(os.path.join(ROOT, "python", "ptxcache"),
                        os.path.join(os.path.dirname(script), "python", "ptxcache"))
        subprocess.run(["chmod", "-R", "a+rX", os.path.dirname(script)])
        r = subprocess.run(setpriv(B, B, ()) + [sys.executable, script, d.socket, path, tests_copy],
                           capture_output=True, text=True, timeout=60,
                           env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"})
        assert r.returncode == 0, r.stderr
        out = eval(r.stdout.strip())
        assert out["found"] is False and out["fd"] is False, out
        assert out["open"] == 13, out       # EACCES
        # B's own value of the same name is another file, its own.
        r = cli_as(d.socket, B, B, "artifact", "put", "t", "k", "-", input=value(MB, 8))
        assert r.returncode == 0, r.stderr
        files = blob_files(d)
        assert len(files) == 2 and os.stat(files[0]).st_ino != os.stat(files[1]).st_ino
        r = cli_as(d.socket, B, B, "artifact", "get", "t", "k")
        assert r.stdout == value(MB, 8)
        assert d.cli("artifact", "get", "t", "k").stdout == v


def test_a_kill_9_anywhere_in_large_puts_leaves_no_orphan_and_no_row_without_its_file():
    with Daemon(workers=1) as d:
        # The state a kill between the rename and the commit leaves (and
        # one in the middle of writing): a file no row names, a temporary.
        with Client(d.socket) as c:
            assert c.artifact_put("t", "kept", value(MB, 1))
        kept = blob_files(d)
        d.stop(signal.SIGKILL)
        orphan = os.path.join(d.cache_dir, "blobs", "ab", "ab" + "0" * 62 + "-" + "1" * 16)
        os.makedirs(os.path.dirname(orphan), exist_ok=True)
        with open(orphan, "wb") as f:
            f.write(value(MB, 2))
        tmp = os.path.join(d.cache_dir, "blobs", ".tmp-0123456789abcdef-1-1")
        with open(tmp, "wb") as f:
            f.write(b"half a value")
        d.start()
        assert blob_files(d) == kept
        assert not os.path.exists(orphan) and not os.path.exists(tmp)
        # Real kills at arbitrary points of a stream of large puts.
        for round_ in range(6):
            stop = threading.Event()

            def putter():
                try:
                    with Client(d.socket) as c:
                        i = 0
                        while not stop.is_set():
                            c.artifact_put("t", "r%d-%d" % (round_, i), value(2 * MB, i))
                            i += 1
                except Exception:
                    pass
            th = threading.Thread(target=putter)
            th.start()
            time.sleep(0.2 + random.random() * 0.5)
            d.stop(signal.SIGKILL)
            stop.set()
            th.join()
            d.start()
            rows = json.loads(d.cli("ls", "--kind", "artifact", "--limit", "1000000", "--json").stdout)
            large = {e["key"] for e in rows if e["data_len"] >= 256 << 10}
            names = {os.path.basename(p)[:64] for p in blob_files(d)}
            assert names == large, (round_, names - large, large - names)
            r = d.cli("verify", check=False)
            assert r.returncode == 0, r.stdout


def test_a_disk_that_fills_inside_a_large_puts_spool_makes_room_once_or_refuses_cleanly():
    """A large put's value goes to its file as it arrives (the spool). On
    a real disk left with less room than the value, the disk fills inside
    that write: the spool makes room from the oldest entries (the disk's
    retry, once, counted) and writes on where it stopped; the value comes
    back whole. A value larger than the free room and the whole cache
    together is refused with the disk's own error, and evicts nothing."""
    with tmpfs(64 * MB) as mnt:
        with Daemon(workers=1, cache_dir=os.path.join(mnt, "cache"),
                    extra=["--max-size", "0", "--artifact-share", "100"]) as d:
            with Client(d.socket) as c:
                for i in range(4):
                    assert c.artifact_put("t", "k%d" % i, value(8 * MB, i)), i
                assert d.stats()["disk_full_retries"] == 0
                # What the cache leaves free taken by a file not its own,
                # but for 2 MB: a quarter of the next value.
                v = os.statvfs(mnt)
                with open(os.path.join(mnt, "filler"), "wb") as f:
                    os.posix_fallocate(f.fileno(), 0, v.f_bavail * v.f_frsize - 2 * MB)
                v = os.statvfs(mnt)
                new = value(8 * MB, 10)
                assert v.f_bavail * v.f_frsize <= 2 * MB < len(new)
                # No commit can fill the disk before the value is written:
                # the one retry is the spool's.
                assert c.artifact_put("t", "new", new)
                s = d.stats()
                assert s["disk_full_retries"] == 1 and s["artifact_spooled_puts"] == 5, s
                assert s["store_errors"] == 0 and s["evictions"] >= 1, s
                assert c.artifact_get("t", "new").value == new
                assert not c.artifact_get("t", "k0").found
                kept = sorted(os.path.basename(p) for p in blob_files(d))
                # Larger than the whole disk: refused by the disk's error,
                # no entry evicted for it, no retry, no temporary left.
                try:
                    c.artifact_put("t", "huge", os.urandom(72 * MB))
                    raise AssertionError("a put larger than the disk was stored")
                except ServerError as e:
                    assert "cannot store entry" in str(e) and "No space left on device" in str(e), e
                after = d.stats()
                assert after["disk_full_retries"] == 1 and after["evictions"] == s["evictions"], after
                assert sorted(os.path.basename(p) for p in blob_files(d)) == kept
                assert not _temporaries(d)
                assert c.artifact_get("t", "new").value == new
            rows = json.loads(d.cli("ls", "--kind", "artifact", "--limit", "1000000", "--json").stdout)
            assert sorted(os.path.basename(p)[:64] for p in blob_files(d)) == \
                sorted(e["key"] for e in rows)
            assert d.cli("verify").returncode == 0


def _rss(pid):
    out = {}
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith(("VmHWM:", "VmRSS:")):
                out[line.split(":")[0]] = int(line.split()[1]) << 10
    return out


def test_a_large_get_never_holds_the_value_in_the_daemons_memory():
    """Inline to a client that reads slowly, and by descriptor: the
    daemon's peak RSS grows by far less than the value (it was a copy per
    reply before: the output queue held what the socket had not taken)."""
    n = 64 * MB
    with Daemon(workers=1) as d:
        with Client(d.socket) as c:
            assert c.artifact_put("t", "big", value(n))
        pid = d.proc.pid
        for fd_wanted in (False, True):
            with open("/proc/%d/clear_refs" % pid, "w") as f:
                f.write("5")            # VmHWM starts again from VmRSS
            base = _rss(pid)["VmRSS"]
            c = FdClient(d.socket)
            c.s.sendall(frame(GET, mp_pack(dict(id=1, ns="t", key="big", fd=fd_wanted))))
            time.sleep(0.5)             # the daemon has answered; nothing read yet
            got = b""
            while True:
                c._fill()
                if len(c.buf) >= 8 and len(c.buf) >= 8 + int.from_bytes(c.buf[4:8], "big"):
                    break
            body = mp_unpack(bytes(c.buf[8:]))
            if fd_wanted:
                assert c.fds and os.fstat(c.fds[0]).st_size == n
                os.close(c.fds[0])
            else:
                got = body["value"]
                assert len(got) == n
            c.close()
            peak = _rss(pid)["VmHWM"]
            # Under ASan, freed memory waits in its quarantine: no bound.
            assert SANITIZED or peak - base < n // 4, (fd_wanted, base, peak)


def test_inline_gets_behind_a_file_hold_one_copy_each_within_max_output():
    """Gets without descriptors, sent together to a client that reads
    nothing: the first goes from its file; the second, queued behind it,
    is read into memory once (it was twice: read, then copied); the third
    would pass max-output and closes the connection before it is read."""
    n = 96 * MB
    with Daemon(workers=1, extra=["--max-output", "150M"]) as d:
        with Client(d.socket) as c:
            assert c.artifact_put("t", "big", value(n))
        pid = d.proc.pid
        with open("/proc/%d/clear_refs" % pid, "w") as f:
            f.write("5")            # VmHWM starts again from VmRSS
        base = _rss(pid)["VmRSS"]
        c = FdClient(d.socket)
        for _ in range(3):
            c.send(GET, ns="t", key="big")
        d.wait_stats(lambda s: s["output_overflows"] == 1, "the third get's overflow")
        c.close()
        peak = _rss(pid)["VmHWM"]
        assert SANITIZED or peak - base < n * 3 // 2, (base, peak)
        with Client(d.socket) as c:
            assert len(c.artifact_get("t", "big").value) == n


# ---- a large put's value, spooled as it arrives (conn.c, artifact.c) ----

def _temporaries(d):
    top = os.path.join(d.cache_dir, "blobs")
    return [os.path.join(top, p) for p in os.listdir(top) if p.startswith(".tmp")]


def _until(pred, what, limit=60):
    """Poll pred until it holds; fails after limit s naming what never did."""
    deadline = time.time() + limit
    while not pred():
        assert time.time() < deadline, "%s never happened" % what
        time.sleep(0.02)


def _spooled_bytes(d):
    """The bytes in the one temporary file, or -1 if there is none."""
    tmp = _temporaries(d)
    assert len(tmp) <= 1, tmp
    try:
        return os.path.getsize(tmp[0]) if tmp else -1
    except FileNotFoundError:
        return -1


def _head(fields, v):
    """A put's frame up to its value's first byte, as the clients send it."""
    parts = frame_parts(PUT, dict(fields, value=v))
    assert len(parts) == 2
    return bytes(parts[0])


def test_a_large_put_is_spooled_and_comes_back_whole_through_python_and_libptxcache():
    v, w = value(3 * MB, 1), value(5 * MB + 17, 2)
    with Daemon(workers=1) as d:
        with Client(d.socket) as c:
            assert c.artifact_put("t", "py", v)
        r = d.cli("artifact", "put", "t", "cli", "-", input=w)
        assert r.returncode == 0, r.stderr
        s = d.stats()
        assert s["artifact_spooled_puts"] == 2 and s["artifact_puts"] == 2, s
        # Each through the other client, and from the files themselves.
        assert d.cli("artifact", "get", "t", "py").stdout == v
        with Client(d.socket) as c:
            assert c.artifact_get("t", "cli").value == w
        assert sorted(os.path.getsize(p) for p in blob_files(d)) == [len(v), len(w)]
        assert _temporaries(d) == []
        # libptxcache reads a value under 32 MiB and maps a larger one.
        big = value(33 * MB, 3)
        with Client(d.socket) as c:
            assert c.artifact_put("t", "big", big)
        assert d.cli("artifact", "get", "t", "big").stdout == big
        # A waiter of the producer's lease is answered from the file.
        with Client(d.socket) as producer, Client(d.socket) as waiter:
            token = producer.artifact_get("t", "leased", lease=True).lease
            got = {}
            th = threading.Thread(target=lambda: got.update(
                r=waiter.artifact_get("t", "leased", wait_ms=60000)))
            th.start()
            d.wait_stats(lambda s: s["artifact_waiting"] == 1, "the get's wait")
            assert producer.artifact_put("t", "leased", v, lease=token)
            th.join()
            assert got["r"].found and got["r"].value == v
        assert d.stats()["artifact_spooled_puts"] == 4
        d.stop()
        d.start()
        assert d.cli("verify").returncode == 0


def test_a_large_puts_sync_leaves_the_daemon_serving_everyone_else():
    """A put's file is synced off the loop (daemon/syncer.c): while its
    fsync takes seconds, other clients are answered, and the put is
    answered, stored, only once it is done; the file is synced once."""
    v = value(2 * MB, 4)
    with tempfile.TemporaryDirectory() as tmp:
        log = os.path.join(tmp, "slowed")
        with Daemon(workers=1, env=slow_disk_env(log, sync_ms=4000)) as d:
            done = {}

            def put():
                with Client(d.socket) as c:
                    done["stored"] = c.artifact_put("t", "big", v)
            with Client(d.socket) as other:
                assert other.artifact_put("t", "small", b"s" * 1024)
                th = threading.Thread(target=put)
                th.start()
                # (On the loop, the sync would be over before stats could say.)
                d.wait_stats(lambda s: s["artifact_syncing"] + s["artifact_spooled_puts"] == 1,
                             "the put's sync")
                # The loop answers while the put's fsync runs: its entry
                # is not there yet (on the loop, these would wait for it,
                # and find it).
                assert other.artifact_get("t", "small").value == b"s" * 1024
                assert other.artifact_put("t", "small2", b"t" * 1024)
                assert not other.artifact_get("t", "big").found
                assert "stored" not in done
                th.join(60)
                assert done.get("stored") is True
                assert other.artifact_get("t", "big").value == v
            assert d.stats()["artifact_spooled_puts"] == 1
            d.stop()
            d.start()
            assert d.cli("verify").returncode == 0
        # The fault was there, and the file was synced once, not again
        # before its rename.
        with open(log) as f:
            slowed = f.read().splitlines()
        assert len(slowed) == 1 and slowed[0].startswith("fsync ") and \
            "/.tmp-spool" in slowed[0], slowed


def test_a_put_whose_file_fails_to_sync_is_refused_and_leaves_nothing():
    # The disk fails the sync of a spooled value's file (slowsync.c: its
    # first fsync fails with EIO and a second says 0, as Linux reports a
    # write-back error once): the put is an error, never "stored"; no row
    # or file of it is left; the daemon serves on and stores it again.
    v = os.urandom(8 * MB)
    with tempfile.TemporaryDirectory() as tmp:
        log = os.path.join(tmp, "faults")
        with Daemon(workers=1, env=slow_disk_env(log, fail_sync=True)) as d:
            with Client(d.socket) as c:
                try:
                    stored = c.artifact_put("t", "big", v)
                except ServerError as e:
                    stored = e
                assert isinstance(stored, ServerError) and "Input/output error" in str(stored), \
                    stored
                assert "fsync-failed" in open(log).read()
                assert c.artifact_get("t", "big").value is None
                assert blob_files(d) == []
                assert c.artifact_put("t", "big", v)
                assert c.artifact_get("t", "big").value == v


def test_the_same_value_put_again_keeps_its_file_when_its_directory_fails_to_sync():
    # A put of the value an entry holds exchanges the two files under the
    # one name; if the directory's sync then fails, the put is an error
    # and the entry keeps a file (the new one, the same bytes), not none.
    v = os.urandom(8 * MB)
    with tempfile.TemporaryDirectory() as tmp:
        cache = os.path.join(tmp, "cache")
        with Daemon(workers=1, cache_dir=cache) as d, Client(d.socket) as c:
            assert c.artifact_put("t", "k", v)
            [f] = blob_files(d)
        log = os.path.join(tmp, "faults")
        env = slow_disk_env(log)
        env["FAILSYNC_MATCH"] = os.path.dirname(f)     # blobs/<kk>
        with Daemon(workers=1, cache_dir=cache, env=env) as d, Client(d.socket) as c:
            try:
                stored = c.artifact_put("t", "k", v)
            except ServerError as e:
                stored = e
            assert isinstance(stored, ServerError), stored
            assert open(log).read() == "fsync-failed %s\n" % os.path.dirname(f)
            assert c.artifact_get("t", "k").value == v
            assert d.stats()["corrupt_blobs"] == 0


def test_a_stop_during_a_puts_sync_waits_for_it_and_answers_the_put():
    v = value(2 * MB, 7)
    with tempfile.TemporaryDirectory() as tmp:
        with Daemon(workers=1, env=slow_disk_env(os.path.join(tmp, "slowed"), sync_ms=3000)) as d:
            done = {}

            def put():
                with Client(d.socket) as c:
                    done["stored"] = c.artifact_put("t", "big", v)
            th = threading.Thread(target=put)
            th.start()
            d.wait_stats(lambda s: s["artifact_syncing"] == 1, "the put's sync")
            d.proc.terminate()
            assert d.proc.wait(60) == 0
            th.join(60)
            assert done.get("stored") is True
            d.start()
            with Client(d.socket) as c:
                assert c.artifact_get("t", "big").value == v
            assert _temporaries(d) == [] and d.cli("verify").returncode == 0


def test_a_replaced_values_file_is_unlinked_after_the_answer_off_the_loop():
    """A removed entry's file (replaced here; evicted and purged go the same
    way) is renamed out of its name and unlinked on a thread of its own:
    a 64 MB file's unlink would hold the loop 18-24 ms."""
    v1, v2 = value(2 * MB, 8), value(2 * MB, 9)
    with tempfile.TemporaryDirectory() as tmp:
        log = os.path.join(tmp, "slowed")
        with Daemon(workers=1, env=slow_disk_env(log, unlink_ms=3000)) as d:
            with Client(d.socket) as c:
                assert c.artifact_put("t", "k", v1)
                [old] = blob_files(d)
                assert c.artifact_put("t", "k", v2)
                # Answered while the old file's unlink still runs.
                assert c.artifact_get("t", "k").value == v2
                files = blob_files(d)
                retired = [f for f in files if os.path.basename(f).startswith(".tmp-gone")]
                assert old not in files and len(retired) == 1, files
                _until(lambda: not os.path.exists(retired[0]), "the retired file's unlink")
                assert [f for f in blob_files(d) if ".tmp" in f] == []
            assert d.cli("verify").returncode == 0
        with open(log) as f:
            slowed = f.read().splitlines()
        assert slowed == ["unlink " + retired[0]], slowed


def test_the_same_value_put_again_takes_its_files_name_and_the_old_goes_off_the_loop():
    """The same bytes put again under their key have the same file name: the
    new file is exchanged into it (renameat2), and the old one, left under
    the new one's temporary name, is unlinked on the thread, not freed by a
    rename over it on the loop (20 ms for 64 MB)."""
    v = value(2 * MB, 8)
    with tempfile.TemporaryDirectory() as tmp:
        log = os.path.join(tmp, "slowed")
        with Daemon(workers=1, env=slow_disk_env(log, unlink_ms=3000)) as d:
            with Client(d.socket) as c:
                assert c.artifact_put("t", "k", v)
                [name] = blob_files(d)
                old = os.stat(name).st_ino
                assert c.artifact_put("t", "k", v)
                # Answered while the old file's unlink still runs.
                assert c.artifact_get("t", "k").value == v
                files = blob_files(d)
                left = [f for f in files if os.path.basename(f).startswith(".tmp-")]
                assert name in files and len(left) == 1, files
                assert os.stat(name).st_ino != old and os.stat(left[0]).st_ino == old
                _until(lambda: not os.path.exists(left[0]), "the old file's unlink")
                assert blob_files(d) == [name]
                assert c.artifact_get("t", "k").value == v
            assert d.cli("verify").returncode == 0
        with open(log) as f:
            slowed = f.read().splitlines()
        assert slowed == ["unlink " + left[0]], slowed


def test_a_request_after_a_large_put_on_its_connection_sees_the_put_stored():
    """A connection whose put is being synced reads nothing more until the
    put is answered: its requests are taken in the order it sent them."""
    v = value(MB, 6)
    with tempfile.TemporaryDirectory() as tmp:
        with Daemon(workers=1, env=slow_disk_env(os.path.join(tmp, "slowed"), sync_ms=1500)) as d:
            fc = FdClient(d.socket)
            fc.send(PUT, ns="t", key="k", value=v)
            fc.send(GET, ns="t", key="k")
            t, put, _ = fc.reply()
            assert t == PUT | 0x80 and put["stored"] is True, put
            t, got, _ = fc.reply()
            assert t == GET | 0x80 and got["found"] is True and got["value"] == v, got
            fc.close()


def _state(pid):
    """The process's state letter (T: stopped)."""
    with open("/proc/%d/stat" % pid) as f:
        return f.read().rsplit(")", 1)[1].split()[0]


def test_a_client_whose_large_value_is_all_there_takes_turns_with_the_others():
    """One readable event reads at most a turn's worth (conn.c, READ_TURN):
    a client whose value is in the socket already (or arrives as fast as
    it is read) would otherwise hold the loop until all of it was read,
    and another client's requests would wait for it. Here 64 MB wait in
    a's socket (a send buffer that large) while the daemon is stopped, and
    a second client connects and sends a get and a stats behind them. The
    second client is accepted in the loop's first round and read in a
    later one, whichever order the rounds take their events in; the
    stats it is answered with are the daemon's at that moment: a's value
    not yet all read (neither syncing nor stored)."""
    v = value(64 * MB, 7)
    with Daemon(workers=1) as d:
        with Client(d.socket) as c:
            assert c.artifact_put("t", "small", b"s" * 1024)
        a = Raw(d.socket, timeout=60)
        try:
            a.s.setsockopt(socket.SOL_SOCKET, 32, 2 * len(v))   # SO_SNDBUFFORCE
        except PermissionError:
            raise Skip("a send buffer of 128 MB needs CAP_NET_ADMIN (root)") from None
        # a's connection accepted and read once: its value makes it ready.
        a.send(frame(GET, pack(dict(id=1, ns="t", key="small"))))
        assert a.recv_frame()[0] == GET | 0x80
        os.kill(d.proc.pid, signal.SIGSTOP)
        try:
            _until(lambda: _state(d.proc.pid) == "T", "the daemon's stop")
            a.send(_head(dict(id=2, ns="t", key="big"), v) + v)
            b = Raw(d.socket, timeout=60)
            b.send(frame(GET, pack(dict(id=1, ns="t", key="small"))) +
                   frame(STATS, pack(dict(id=2))))
        finally:
            os.kill(d.proc.pid, signal.SIGCONT)
        t, body = b.recv_frame()
        assert t == GET | 0x80 and mp_unpack(body)["value"] == b"s" * 1024, mp_unpack(body)
        t, body = b.recv_frame()
        assert t == STATS | 0x80, t
        s = json.loads(mp_unpack(body)["json"])
        assert s["artifact_syncing"] == 0 and s["artifact_spooled_puts"] == 0, s
        t, body = a.recv_frame()
        assert t == PUT | 0x80 and mp_unpack(body)["stored"] is True, mp_unpack(body)
        a.close()
        b.close()
        assert d.stats()["artifact_spooled_puts"] == 1
        with Client(d.socket) as c:
            assert c.artifact_get("t", "big").value == v


def test_a_put_whose_value_is_not_last_is_read_whole_and_stored():
    """An old client's frame: the value first, the other fields after it."""
    v = value(2 * MB, 5)
    body = pack({"value": v, "id": 1, "ns": "t", "key": "first"})
    with Daemon(workers=1) as d:
        r = Raw(d.socket, timeout=60)
        r.send(frame(PUT, body))
        t, rep = r.recv_frame()
        assert t == PUT | 0x80 and mp_unpack(rep)["stored"] is True, mp_unpack(rep)
        r.close()
        s = d.stats()
        assert s["artifact_spooled_puts"] == 0 and s["artifact_puts"] == 1, s
        with Client(d.socket) as c:
            assert c.artifact_get("t", "first").value == v


def test_a_frame_read_whole_is_not_kept_while_the_next_one_waits_for_its_rest():
    """An old client's 48 MiB put, read whole, sent with the first bytes of
    its next request: while the rest of that request is awaited, the
    daemon keeps those bytes, not the buffer the put was read into
    (conn.c's compact_in())."""
    n = 48 * MB
    v = value(n, 6)
    get = frame(GET, mp_pack(dict(id=2, ns="t", key="whole")))
    with Daemon(workers=1) as d:
        pid = d.proc.pid
        base = _rss(pid)["VmRSS"]
        r = Raw(d.socket, timeout=60)
        r.send(frame(PUT, pack({"value": v, "id": 1, "ns": "t", "key": "whole"})) + get[:5])
        t, rep = r.recv_frame()
        assert t == PUT | 0x80 and mp_unpack(rep)["stored"] is True, mp_unpack(rep)
        # The put itself leaves about 16 MiB of freed heap kept for reuse
        # (server.c's M_TRIM_THRESHOLD); the buffer kept was 64 MiB more.
        # Under ASan, freed memory waits in its quarantine: no bound.
        if not SANITIZED:
            _until(lambda: _rss(pid)["VmRSS"] - base < n // 2,
                   "the 48 MiB buffer given back", limit=5)
        r.send(get[5:])         # the five bytes kept make the get whole
        t, rep = r.recv_frame()
        assert t == GET | 0x80 and mp_unpack(rep)["value"] == v
        r.close()


def test_a_client_that_stops_or_closes_mid_value_leaves_no_temporary_file():
    v = value(8 * MB, 3)
    with Daemon(workers=1, extra=["--header-timeout", "2"]) as d:
        head = _head(dict(id=1, ns="t", key="k"), v)
        # Half the value, then silence: what came is in the temporary file
        # (not in memory), until the frame's deadline removes it.
        r = Raw(d.socket, timeout=60)
        r.send(head + v[:len(v) // 2])
        _until(lambda: _spooled_bytes(d) == len(v) // 2, "half the value in its file")
        t, body = r.recv_frame()
        assert t == ERROR and mp_unpack(body)["code"] == "timeout", mp_unpack(body)
        assert r.closed()
        r.close()
        _until(lambda: _temporaries(d) == [], "the temporary file's removal")
        assert d.stats()["header_timeouts"] == 1
        # A quarter, then the client closes.
        r = Raw(d.socket, timeout=60)
        r.send(head + v[:len(v) // 4])
        _until(lambda: _spooled_bytes(d) == len(v) // 4, "a quarter of the value in its file")
        r.close()
        _until(lambda: _temporaries(d) == [], "the temporary file's removal")
        # Nothing was stored, and the daemon serves on.
        assert blob_files(d) == [] and d.stats()["artifact_puts"] == 0
        with Client(d.socket) as c:
            assert not c.artifact_get("t", "k").found
            assert c.artifact_put("t", "k", v)
            assert c.artifact_get("t", "k").value == v


def test_a_put_over_artifact_max_value_is_refused_before_any_byte_of_it_is_written():
    with Daemon(workers=1, extra=["--artifact-max-value", "1M"]) as d:
        v = value(MB + 4096, 4)
        r = Raw(d.socket, timeout=60)
        # The head alone: answered before a byte of the value is sent.
        r.send(_head(dict(id=1, ns="t", key="k"), v))
        t, body = r.recv_frame()
        body = mp_unpack(body)
        assert t == ERROR and body["code"] == "invalid", body
        assert "artifact-max-value" in body["message"], body
        assert _temporaries(d) == [] and blob_files(d) == []
        # Its bytes are dropped as they come; the connection serves on.
        r.send(v + frame(2, mp_pack(dict(id=2))))
        t, body = r.recv_frame()
        assert t == 2 | 0x80 and mp_unpack(body)["id"] == 2
        assert _temporaries(d) == [] and blob_files(d) == []
        r.close()
        # A header that claims past every limit (max-request, 64 MiB, and
        # artifact-max-value) is refused at the header.
        r = Raw(d.socket, timeout=60)
        r.send(b"PX\x01\x0b" + (100 * MB).to_bytes(4, "big") + b"\xdf")
        t, body = r.recv_frame()
        assert t == ERROR and mp_unpack(body)["code"] == "protocol", mp_unpack(body)
        assert r.closed()
        r.close()
        # The lease is checked before the value too.
        r = Raw(d.socket, timeout=60)
        w = value(MB // 2, 5)
        r.send(_head(dict(id=3, ns="t", key="k", lease=99), w))
        t, body = r.recv_frame()
        assert t == ERROR and mp_unpack(body)["code"] == "denied", mp_unpack(body)
        assert _temporaries(d) == []
        r.close()
        with Client(d.socket) as c:
            assert c.artifact_put("t", "k", w)
        assert d.stats()["artifact_spooled_puts"] == 1


PUT_PROGRAM = r"""
#include <stdio.h>
#include <stdlib.h>
#include "client/ptxcache.h"
/* argv: socket. Each line of stdin, "SIZE KEY": one put of SIZE bytes
 * under t/KEY on the same handle; prints "RESULT MESSAGE". */
int main(int argc, char **argv)
{
	char err[256], key[64];
	size_t n;
	ptxcache *pc = ptxcache_connect(argv[1], 60000, err, sizeof err);
	if (!pc) { printf("connect: %s\n", err); return 3; }
	while (scanf("%zu %63s", &n, key) == 2) {
		char *v = malloc(n);
		for (size_t i = 0; i < n; i++)
			v[i] = (char)(i * 7);
		int r = ptxcache_artifact_put(pc, "t", key, v, n, 0);
		printf("%d %s\n", r, r ? ptxcache_errmsg(pc) : "");
		fflush(stdout);
		free(v);
	}
	ptxcache_close(pc);
	return 0;
}
"""


class Counting:
    """A Unix socket at path relaying one client to the daemon, counting
    the bytes the client sends."""

    def __init__(self, path, target):
        self.sent = 0
        self.ls = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.ls.bind(path)
        self.ls.listen(1)
        self.path, self.target = path, target
        threading.Thread(target=self._run, daemon=True).start()

    def _run(self):
        a, _ = self.ls.accept()
        b = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        b.connect(self.target)
        sel = selectors.DefaultSelector()
        sel.register(a, selectors.EVENT_READ, b)
        sel.register(b, selectors.EVENT_READ, a)
        while True:
            for k, _ in sel.select():
                data = k.fileobj.recv(1 << 20)
                if not data:
                    a.close()
                    b.close()
                    return
                if k.fileobj is a:
                    self.sent += len(data)
                k.data.sendall(data)


def test_libptxcache_does_not_send_a_value_over_artifact_max_value():
    """libptxcache asks hello's artifact_max_value before its first put of
    more than 1 MiB, and sends no byte of a value over it; a limit raised
    since (SIGHUP) is asked again before a refusal."""
    with tempfile.TemporaryDirectory() as t:
        conf = os.path.join(t, "ptxcached.conf")
        with open(conf, "w") as f:
            f.write("artifact-max-value = 1M\n")
        with Daemon(workers=1, extra=["--config", conf, "--log-level", "info"]) as d:
            exe = c_client(PUT_PROGRAM, t)
            relay = Counting(os.path.join(t, "relay.sock"), d.socket)
            p = subprocess.Popen([exe, relay.path], stdin=subprocess.PIPE,
                                 stdout=subprocess.PIPE, text=True)

            def put(n, key):
                p.stdin.write("%d %s\n" % (n, key))
                p.stdin.flush()
                return p.stdout.readline().strip()

            try:
                got = put(4 * MB, "big")
                assert got.startswith("-1 ") and "over the limit of 1048576 " \
                    "(artifact-max-value)" in got, got
                assert relay.sent < 4096, relay.sent
                assert put(MB // 2, "small") == "0", "a put under the limit is sent"
                assert relay.sent > MB // 2
                with open(conf, "w") as f:
                    f.write("artifact-max-value = 8M\n")
                n = d.logtext().count("configuration reloaded")
                d.proc.send_signal(signal.SIGHUP)
                _until(lambda: d.logtext().count("configuration reloaded") > n, "the reload")
                assert put(4 * MB, "big") == "0", "the raised limit is asked again"
            finally:
                p.stdin.close()
                p.wait(timeout=60)
            with Client(d.socket) as c:
                assert c.artifact_get("t", "big").value == bytes(i * 7 % 256 for i in range(4 * MB))
            assert d.stats()["artifact_puts"] == 2


def test_a_kill_9_mid_spool_leaves_no_temporary_after_the_restart():
    with Daemon(workers=1) as d:
        with Client(d.socket) as c:
            assert c.artifact_put("t", "kept", value(MB, 1))
        kept = blob_files(d)
        v = value(32 * MB, 4)
        r = Raw(d.socket, timeout=60)
        r.send(_head(dict(id=1, ns="t", key="half"), v) + v[:len(v) // 2])
        _until(lambda: _spooled_bytes(d) == len(v) // 2, "half the value in its file")
        d.stop(signal.SIGKILL)
        r.close()
        assert len(_temporaries(d)) == 1
        d.start()
        assert _temporaries(d) == [] and blob_files(d) == kept
        assert d.cli("verify").returncode == 0
        with Client(d.socket) as c:
            assert c.artifact_get("t", "kept").value == value(MB, 1)
            assert not c.artifact_get("t", "half").found


def test_a_large_put_never_holds_the_value_in_the_daemons_memory():
    n = 256 * MB
    v = value(n, 9)
    with Daemon(workers=1) as d:
        pid = d.proc.pid
        with Client(d.socket) as c:
            assert c.artifact_put("t", "warm", value(MB))
            with open("/proc/%d/clear_refs" % pid, "w") as f:
                f.write("5")            # VmHWM starts again from VmRSS
            base = _rss(pid)["VmRSS"]
            assert c.artifact_put("t", "big", v)
            peak = _rss(pid)["VmHWM"]
        assert SANITIZED or peak - base < n // 4, (base, peak)
        assert d.stats()["artifact_spooled_puts"] == 2
        fc = FdClient(d.socket)
        _, body, fd = fc.call(GET, ns="t", key="big", fd=True)
        assert fd is not None and os.fstat(fd).st_size == n
        assert os.pread(fd, n, 0) == v
        os.close(fd)
        fc.close()
