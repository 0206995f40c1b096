# SPDX-License-Identifier: Apache-2.0
"""Helpers of the tests: a msgpack reader for error frames, clients run as
another user (setpriv), systemd's tools, a small disk of its own (tmpfs).

Not a test module (run.py only runs test_*.py)."""
import os
import shutil
import struct
import subprocess
import sys
import tempfile
from contextlib import contextmanager

from harness import CLI, Skip, cli_for_others, small_ir  # noqa: F401 (small_ir: for the tests)

def mp_unpack(data):
    """Decode one msgpack value (what the daemon sends: maps, str, bin,
    ints, bools, nil, arrays). Returns (value, bytes used)."""
    b = data[0]

    def seq(n, off, as_map):
        out = {} if as_map else []
        for _ in range(n):
            k, used = mp_unpack(data[off:])
            off += used
            if as_map:
                v, used = mp_unpack(data[off:])
                off += used
                out[k.decode() if isinstance(k, bytes) else k] = v
            else:
                out.append(k)
        return out, off

    if b < 0x80:
        return b, 1
    if b >= 0xe0:
        return b - 0x100, 1
    if 0x80 <= b <= 0x8f:
        return seq(b & 0x0f, 1, True)
    if 0x90 <= b <= 0x9f:
        return seq(b & 0x0f, 1, False)
    if 0xa0 <= b <= 0xbf:
        n = b & 0x1f
        return data[1:1 + n], 1 + n
    if b == 0xc0:
        return None, 1
    if b in (0xc2, 0xc3):
        return b == 0xc3, 1
    sizes = {0xc4: 1, 0xc5: 2, 0xc6: 4, 0xd9: 1, 0xda: 2, 0xdb: 4}
    if b in sizes:
        w = sizes[b]
        n = int.from_bytes(data[1:1 + w], "big")
        return data[1 + w:1 + w + n], 1 + w + n
    ints = {0xcc: (1, False), 0xcd: (2, False), 0xce: (4, False), 0xcf: (8, False),
            0xd0: (1, True), 0xd1: (2, True), 0xd2: (4, True), 0xd3: (8, True)}
    if b in ints:
        w, signed = ints[b]
        return int.from_bytes(data[1:1 + w], "big", signed=signed), 1 + w
    if b in (0xde, 0xdf, 0xdc, 0xdd):
        w = 2 if b in (0xde, 0xdc) else 4
        return seq(int.from_bytes(data[1:1 + w], "big"), 1 + w, b in (0xde, 0xdf))
    raise ValueError("msgpack type 0x%02x" % b)


def parse_frame(data):
    """(type, decoded body) of the first frame in data, or None."""
    if len(data) < 8:
        return None
    assert data[:2] == b"PX", data[:8]
    n = struct.unpack(">I", data[4:8])[0]
    return data[3], mp_unpack(data[8:8 + n])[0]


# A ping as a raw client; prints whatever the daemon sent back, to EOF or
# the first whole frame. Run by probe_as() under another uid.
_PROBE = r"""
import socket, struct, sys
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.settimeout(30)
s.connect(sys.argv[1])
body = b"\x81\xa2id\x07"
try:
    s.sendall(b"PX\x01\x02" + struct.pack(">I", len(body)) + body)
except OSError:
    pass
data = b""
while len(data) < 8 or len(data) < 8 + struct.unpack(">I", data[4:8])[0]:
    try:
        c = s.recv(65536)
    except OSError:
        break
    if not c:
        break
    data += c
sys.stdout.buffer.write(data)
"""


# A raw client: sends what comes on stdin, says "sent", then prints each
# of N frames from the daemon as a JSON line with its arrival time. Run by
# raw_as() under another uid.
_RAW = r"""
import json, socket, struct, sys, time
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.settimeout(float(sys.argv[3]))
s.connect(sys.argv[1])
s.sendall(sys.stdin.buffer.read())
print("sent", flush=True)
buf = b""
left = int(sys.argv[2])
while left:
    while len(buf) < 8 or len(buf) < 8 + struct.unpack(">I", buf[4:8])[0]:
        c = s.recv(1 << 20)
        if not c:
            sys.exit(3)
        buf += c
    n = 8 + struct.unpack(">I", buf[4:8])[0]
    if buf[3] != 0xfe:      # progress frames are not replies
        print(json.dumps({"t": time.time(), "type": buf[3], "body": buf[8:n].hex()}), flush=True)
        left -= 1
    buf = buf[n:]
"""


class RawAs:
    """A raw connection as another uid (a child process): send(frames)
    once, then replies() for the frames that come back, as (arrival time,
    type, body bytes); progress frames are skipped."""

    def __init__(self, path, uid, data, replies=1, timeout=120):
        self.n = replies
        self.p = subprocess.Popen(setpriv(uid, uid) + [sys.executable, "-c", _RAW, path,
                                                       str(replies), str(timeout)],
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE)
        self.p.stdin.write(data)
        self.p.stdin.close()
        line = self.p.stdout.readline()
        assert line == b"sent\n", (line, self.p.stderr.read())

    def replies(self):
        import json
        out = []
        for _ in range(self.n):
            line = self.p.stdout.readline()
            assert line, "no reply: %r" % self.p.stderr.read()
            j = json.loads(line)
            out.append((j["t"], j["type"], bytes.fromhex(j["body"])))
        self.p.wait(60)
        return out


def setpriv(uid, gid, groups=()):
    """The argv prefix that runs a command as uid/gid with exactly these
    supplementary groups (the tests run as root)."""
    if os.geteuid() != 0:
        raise Skip("needs root to run clients as other users")
    exe = shutil.which("setpriv")
    if not exe:
        raise Skip("setpriv (util-linux) not found")
    g = ["--groups", ",".join(str(x) for x in groups)] if groups else ["--clear-groups"]
    return [exe, "--reuid", str(uid), "--regid", str(gid)] + g + ["--"]


def probe_as(path, uid, gid, groups=()):
    """Connect to path as uid, send a ping, return (frame type, body)."""
    r = subprocess.run(setpriv(uid, gid, groups) + [sys.executable, "-c", _PROBE, path],
                       capture_output=True, timeout=60)
    assert r.returncode == 0, r.stderr.decode(errors="replace")
    f = parse_frame(r.stdout)
    assert f is not None, "no frame from the daemon: %r" % r.stdout
    return f


def cli_as(path, uid, gid, *args, groups=(), input=None):
    return subprocess.run(setpriv(uid, gid, groups) + [cli_for_others(), "--socket", path] +
                          list(args),
                          input=input, capture_output=True, timeout=120)


def make_reachable(sock, mode=0o666):
    """Let other users reach a socket the daemon made 0600 in 0700 dirs
    under the temp directory: search permission on each dir, then mode."""
    top = tempfile.gettempdir()
    d = os.path.dirname(sock)
    while d.startswith(top + "/"):
        os.chmod(d, os.stat(d).st_mode & 0o7777 | 0o011)
        d = os.path.dirname(d)
    os.chmod(sock, mode)


def tool(name, *more):
    """A systemd tool by name, or Skip."""
    for n in (name,) + more:
        p = shutil.which(n)
        if p:
            return p
        for d in ("/usr/bin", "/bin", "/lib/systemd", "/usr/lib/systemd"):
            p = os.path.join(d, n)
            if os.access(p, os.X_OK):
                return p
    raise Skip("%s not found (Debian package systemd)" % name)


@contextmanager
def tmpfs(size):
    """A real disk of size bytes that fills (a tmpfs, mode 0700), mounted
    for the with block and gone after it; a Skip where none can be
    mounted."""
    if os.geteuid() != 0:
        raise Skip("needs root to mount a small tmpfs")
    mnt = tempfile.mkdtemp(prefix="ptxcache-disk-")
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=%d,mode=0700" % size, "tmpfs", mnt],
                       capture_output=True, text=True)
    if r.returncode != 0:
        os.rmdir(mnt)
        raise Skip("cannot mount a tmpfs here: %s" % r.stderr.strip())
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", mnt])
        os.rmdir(mnt)
