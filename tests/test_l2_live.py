# SPDX-License-Identifier: Apache-2.0
"""The tier (daemon/l2.c over l2_conn.c) against a real redis-server,
through build/l2drive (the module alone on a libevent loop, driven line by
line; see tests/tools/l2drive.c):
hits with identical bytes across two "nodes", misses, tampered values
rejected, Redis stopped or slow (every request answered, the breaker opens
and answers at once, recovery), read-only mode, prefix, SELECT and the
documented ACL over TCP. Values are also sealed and opened here, in Python
(AES-256-GCM through libcrypto with ctypes, HKDF with hmac), from the
layout daemon/l2.c's design comment documents alone."""
import ctypes
import ctypes.util
import hashlib
import hmac
import os
import select
import struct
import subprocess
import sys
import time

import harness
from redis_fixture import RedisServer

L2DRIVE = os.path.join(harness.BUILD, "l2drive")
SECRET = b"a cluster secret"
IDENTITY = b"l2drive test compiler"      # l2drive's default --identity
KEY = "5a" * 32
KEY2 = "c3" * 32


_crypto = ctypes.CDLL(ctypes.util.find_library("crypto") or "libcrypto.so.3")
for _f in ("EVP_CIPHER_CTX_new", "EVP_aes_256_gcm"):
    getattr(_crypto, _f).restype = ctypes.c_void_p
_crypto.EVP_CIPHER_CTX_free.argtypes = [ctypes.c_void_p]
_crypto.EVP_CipherInit_ex.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p,
                                      ctypes.c_char_p, ctypes.c_char_p, ctypes.c_int]
_crypto.EVP_CipherUpdate.argtypes = [ctypes.c_void_p, ctypes.c_void_p,
                                     ctypes.POINTER(ctypes.c_int), ctypes.c_char_p, ctypes.c_int]
_crypto.EVP_CipherFinal_ex.argtypes = [ctypes.c_void_p, ctypes.c_void_p,
                                       ctypes.POINTER(ctypes.c_int)]
_crypto.EVP_CIPHER_CTX_ctrl.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_int,
                                        ctypes.c_void_p]
_GCM_GET_TAG, _GCM_SET_TAG = 0x10, 0x11


def gcm(seal_it, key, nonce, ad, data, tag=b""):
    """AES-256-GCM through libcrypto: (ciphertext, tag) when sealing, the
    plaintext when opening (AssertionError "does not open" if the tag is
    wrong)."""
    c = _crypto.EVP_CIPHER_CTX_new()
    try:
        n = ctypes.c_int()
        out = ctypes.create_string_buffer(len(data) + 16)
        assert _crypto.EVP_CipherInit_ex(c, _crypto.EVP_aes_256_gcm(), None, key, nonce,
                                         int(seal_it)) == 1
        assert _crypto.EVP_CipherUpdate(c, None, ctypes.byref(n), ad, len(ad)) == 1
        assert _crypto.EVP_CipherUpdate(c, out, ctypes.byref(n), data, len(data)) == 1
        if not seal_it:
            t = ctypes.create_string_buffer(bytes(tag), 16)
            assert _crypto.EVP_CIPHER_CTX_ctrl(c, _GCM_SET_TAG, 16, t) == 1
        final = _crypto.EVP_CipherFinal_ex(c, ctypes.byref(out, len(data)), ctypes.byref(n))
        if not seal_it:
            assert final == 1, "does not open"
            return out.raw[:len(data)]
        t = ctypes.create_string_buffer(16)
        assert final == 1 and _crypto.EVP_CIPHER_CTX_ctrl(c, _GCM_GET_TAG, 16, t) == 1
        return out.raw[:len(data)], t.raw
    finally:
        _crypto.EVP_CIPHER_CTX_free(c)


def value_key(scope, vid, secret=SECRET):
    """HKDF-SHA-256 (RFC 5869, one block) as the design comment of
    daemon/l2.c documents it: salt "ptxcache-l2 v2", info "value" |
    u16 scope length | scope | id."""
    prk = hmac.new(b"ptxcache-l2 v2", secret, hashlib.sha256).digest()
    info = b"value" + struct.pack(">H", len(scope)) + scope + vid
    return hmac.new(prk, info + b"\x01", hashlib.sha256).digest()


def nonce(domain, index=0):
    return bytes([domain]) + bytes(7) + struct.pack(">I", index)


def record(data, log=b"log", kind=1, status=0, identity=IDENTITY):
    return (bytes([kind]) + struct.pack(">iH", status, len(identity)) + identity
            + struct.pack(">I", len(data)) + data + struct.pack(">I", len(log)) + log)


def seal(key_hex, data, log=b"log", kind=1, status=0, identity=IDENTITY,
         secret=SECRET, version=2, scope=b"ptxcache:", vid=None):
    """A value stored whole, as daemon/l2.c's design comment documents it
    (version 1: the earlier, HMAC-sealed envelope)."""
    if version == 1:
        body = (b"PXL2" + bytes([1, kind]) + struct.pack(">iH", status, len(identity))
                + identity + struct.pack(">I", len(data)) + data
                + struct.pack(">I", len(log)) + log)
        return body + hmac.new(secret, bytes.fromhex(key_hex) + body, hashlib.sha256).digest()
    vid = vid or os.urandom(16)
    head = b"PXL2" + bytes([version]) + vid
    name = scope + key_hex.encode()
    ct, tag = gcm(True, value_key(scope, vid, secret), nonce(1), head + name,
                  record(data, log, kind, status, identity))
    return head + ct + tag


def unseal(name, value, identity=IDENTITY, secret=SECRET):
    """The data of a value stored whole under name (prefix + space + hex)."""
    if isinstance(name, str):
        name = name.encode()
    assert value[:5] == b"PXL2\x02", value[:5]
    head, ct, tag = value[:21], value[21:-16], value[-16:]
    rec = gcm(False, value_key(name[:-64], head[5:], secret), nonce(1), head + name, ct, tag)
    n = struct.unpack(">H", rec[5:7])[0]
    assert rec[7:7 + n] == identity
    dlen = struct.unpack(">I", rec[7 + n:11 + n])[0]
    return rec[11 + n:11 + n + dlen]


def manifest(name, vid, total, n_chunks, chunk_len=(1 << 20) - 16, version=2, secret=SECRET):
    """A chunked value's manifest under name, as documented."""
    if isinstance(name, str):
        name = name.encode()
    body = b"PXLM" + bytes([version]) + vid + struct.pack(">IQI", chunk_len, total, n_chunks)
    _, tag = gcm(True, value_key(name[:-64], vid, secret), nonce(2), body + name, b"")
    return body + tag


def seal_chunk(name, vid, i, n, part, secret=SECRET):
    if isinstance(name, str):
        name = name.encode()
    ad = b"PXLC\x02" + vid + struct.pack(">II", i, n) + name
    ct, tag = gcm(True, value_key(name[:-64], vid, secret), nonce(0, i), ad, part)
    return ct + tag


def open_chunk(name, vid, i, n, stored, secret=SECRET):
    if isinstance(name, str):
        name = name.encode()
    ad = b"PXLC\x02" + vid + struct.pack(">II", i, n) + name
    return gcm(False, value_key(name[:-64], vid, secret), nonce(0, i), ad, stored[:-16],
               stored[-16:])


class Drive:
    """One l2drive process: one daemon's view of the tier."""

    def __init__(self, url, tmp, *flags, secret=SECRET + b"\n"):
        self.tmp = tmp
        self.secret = os.path.join(tmp, "secret-%d" % id(self))
        with open(self.secret, "wb") as f:
            f.write(secret)     # the newline is not part of the secret
        # The daemon's default timeout (l2drive's is the same, 50 ms of
        # silence) unless a test is about the setting: as a user runs it.
        self.proc = subprocess.Popen([L2DRIVE] + list(flags) + [url, self.secret],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE)
        self.buf = b""

    def cmd(self, line, timeout=30):
        """Send a command; its one-line answer. timeout only guards
        against a hang: every command answers in well under a second."""
        self.proc.stdin.write(line.encode() + b"\n")
        self.proc.stdin.flush()
        deadline = time.time() + timeout
        while b"\n" not in self.buf:
            left = deadline - time.time()
            assert left > 0, "l2drive did not answer %r" % line
            r, _, _ = select.select([self.proc.stdout], [], [], left)
            if r:
                chunk = os.read(self.proc.stdout.fileno(), 65536)
                assert chunk, "l2drive exited (%s): %s" % (
                    self.proc.poll(), self.proc.stderr.read().decode(errors="replace"))
                self.buf += chunk
        out, self.buf = self.buf.split(b"\n", 1)
        return out.decode()

    def get(self, key, path=None):
        """("hit"|"miss", sync) where sync means answered inside l2_get()."""
        r = self.cmd("get %s%s" % (key, " " + path if path else ""))
        word, sync = r.split()[0], "sync=1" in r
        assert word in ("hit", "miss"), r
        return word, sync

    def put(self, key, data):
        path = os.path.join(self.tmp, "put-data")
        with open(path, "wb") as f:
            f.write(data)
        assert self.cmd("put %s %s" % (key, path)) == "queued"

    def counters(self):
        return {k: int(v) for k, v in (kv.split("=") for kv in self.cmd("counters").split())}

    def wait(self, cond, what, tries=200, ms=20):
        """Let the loop run until cond(counters) holds (bounded)."""
        for _ in range(tries):
            c = self.counters()
            if cond(c):
                return c
            self.cmd("sleep %d" % ms)
        raise AssertionError("%s: never happened; counters %s" % (what, self.counters()))

    def close(self):
        if self.proc.poll() is None:
            try:
                self.proc.stdin.close()
            except BrokenPipeError:
                pass
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        err = self.proc.stderr.read().decode(errors="replace")
        self.proc.stdout.close()
        self.proc.stderr.close()
        # A clean exit (l2_free() included; under ASan, no leaks), unless
        # the test is failing already.
        if sys.exc_info()[0] is None:
            assert self.proc.returncode == 0, "l2drive exited %s:\n%s" % (
                self.proc.returncode, err)
        return err


def _setup():
    if not os.path.exists(L2DRIVE):
        raise AssertionError("%s not built (make all)" % L2DRIVE)
    return RedisServer()


def _published(d, r, key, data):
    """d publishes data under key; returns once Redis holds it."""
    before = d.counters()["writes"]
    d.put(key, data)
    d.wait(lambda c: c["writes"] == before + 1, "the write")
    assert r.get("ptxcache:" + key) is not None


def test_l2_hit_across_nodes_identical_bytes():
    with _setup() as r:
        a, b = Drive(r.url, r.tmp), Drive(r.url, r.tmp)
        try:
            data = bytes(range(256)) * 40 + b"\x00tail"
            assert a.get(KEY) == ("miss", False)
            _published(a, r, KEY, data)
            assert r.keys() == ["ptxcache:" + KEY]
            # The stored value is the documented layout, sealed with the
            # secret without its trailing newline, and none of it readable.
            stored = r.get("ptxcache:" + KEY)
            assert unseal("ptxcache:" + KEY, stored) == data
            assert data[:64] not in stored and IDENTITY not in stored
            out = os.path.join(r.tmp, "got")
            assert b.get(KEY, out) == ("hit", False)
            with open(out, "rb") as f:
                assert f.read() == data
            c = b.counters()
            assert (c["hits"], c["misses"], c["rejects"], c["errors"], c["writes"]) == (1, 0, 0, 0, 0)
            # A value sealed elsewhere (here: by the format's definition)
            # is a hit too; a negative entry keeps its status.
            r.set("ptxcache:" + KEY2, seal(KEY2, b"", log=b"error: x", status=-3))
            assert b.cmd("get " + KEY2) == "hit sync=0 len=0 status=-3"
        finally:
            a.close()
            b.close()


def test_l2_miss():
    with _setup() as r:
        d = Drive(r.url, r.tmp)
        try:
            assert d.get(KEY) == ("miss", False)
            assert d.get(KEY) == ("miss", False)
            c = d.counters()
            assert (c["misses"], c["hits"], c["errors"], c["timeouts"]) == (2, 0, 0, 0)
            assert r.calls("getrange") == 2
        finally:
            d.close()


def test_l2_tampered_values_rejected():
    with _setup() as r:
        d = Drive(r.url, r.tmp, "--max-value", "8192")
        try:
            data = b"// a kernel's PTX\n" * 50
            good = seal(KEY, data)
            flipped = bytearray(good)
            flipped[60] ^= 1                         # in the record
            badtag = bytearray(good)
            badtag[-5] ^= 0x10
            badid = bytearray(good)
            badid[7] ^= 1
            cases = {
                "flipped record byte": bytes(flipped),
                "wrong tag": bytes(badtag),
                "another id": bytes(badid),
                "another key's valid value": seal(KEY2, data),
                "another scope's valid value": seal(KEY, data, scope=b"ptxcache:artifact:u1:"),
                "another prefix's valid value": seal(KEY, data, scope=b"other:"),
                "wrong version": seal(KEY, data, version=3),
                "truncated": good[:-1],
                "truncated to the header": good[:20],
                "one byte longer": good + b"x",
                "wrong identity": seal(KEY, data, identity=b"another compiler"),
                "wrong secret": seal(KEY, data, secret=b"another secret"),
                "not an envelope": b"plain text",
                "larger than l2-max-value": seal(KEY, b"x" * 9000),
            }
            rejects = 0
            for name, value in cases.items():
                r.set("ptxcache:" + KEY, value)
                assert d.get(KEY) == ("miss", False), name
                rejects += 1
                c = d.counters()
                assert c["rejects"] == rejects and c["hits"] == 0, (name, c)
            # Rejects are Redis working: no errors, the breaker stays shut.
            assert c["errors"] == 0 and c["breaker_open"] == 0
            # A value of the earlier, HMAC-sealed format is a miss, not
            # a reject: honest, merely old.
            r.set("ptxcache:" + KEY, seal(KEY, data, version=1))
            assert d.get(KEY) == ("miss", False)
            c = d.counters()
            assert c["rejects"] == rejects and c["misses"] == 1, c
            # The same value untampered is a hit.
            r.set("ptxcache:" + KEY, good)
            assert d.get(KEY) == ("hit", False)
        finally:
            err = d.close()
        assert "rejected the value of" in err and "does not open" in err
        assert "cluster secret" not in err and "a kernel" not in err


def test_l2_redis_stopped_breaker_and_recovery():
    with _setup() as r:
        d = Drive(r.url, r.tmp)
        try:
            _published(d, r, KEY, b"ptx before")
            assert d.get(KEY)[0] == "hit"
            r.stop()
            # Every request answered, as not found; failures counted until
            # the breaker opens (5 in a row).
            for _ in range(5):
                assert d.get(KEY)[0] == "miss"
            c = d.counters()
            assert c["errors"] + c["timeouts"] == 5, c
            assert c["breaker_open"] == 1 and c["breaker_opens"] == 1, c
            # Open: answered inside l2_get(), nothing tried, nothing counted.
            for _ in range(50):
                assert d.get(KEY) == ("miss", True)
            d.put(KEY2, b"dropped")
            c2 = d.counters()
            assert c2["errors"] + c2["timeouts"] == 5 and c2["writes"] == 1, c2

            r.start()               # empty: no persistence
            r.set("ptxcache:" + KEY, seal(KEY, b"ptx after"))
            # After the open period a probe goes out and closes the breaker.
            for _ in range(200):
                if d.get(KEY)[0] == "hit":
                    break
                d.cmd("sleep 50")
            else:
                raise AssertionError("no recovery: %s" % d.counters())
            c3 = d.counters()
            assert c3["breaker_open"] == 0 and c3["hits"] == 2, c3
            _published(d, r, KEY2, b"after recovery")
        finally:
            err = d.close()
        assert "going on without it" in err and "answers again" in err


def test_l2_a_probe_that_fails_here_leaves_the_next_request_to_probe():
    """A half-open breaker admits one probe. When that request fails in
    this process before it sends anything (here: no memory to seal a
    put), Redis has not been asked, and the next request must probe; it
    must not find the tier waiting on a probe that never went."""
    if harness.SANITIZED:
        raise harness.Skip("the sanitizer's runtime reserves more address space than any limit")
    import resource
    with _setup() as r:
        d = Drive(r.url, r.tmp)
        try:
            _published(d, r, KEY, b"ptx before")
            r.stop()
            for _ in range(5):
                assert d.get(KEY)[0] == "miss"
            assert d.counters()["breaker_open"] == 1
            r.start()
            r.set("ptxcache:" + KEY, seal(KEY, b"ptx after"))
            d.cmd("sleep 1100")             # past the first open period
            # What l2drive has mapped now, and room for a 48 MiB value
            # read (in a 64 MiB buffer) but not for the put's own copy.
            with open("/proc/%d/status" % d.proc.pid) as f:
                vm = next(int(x.split()[1]) << 10 for x in f if x.startswith("VmSize:"))
            _, hard = resource.prlimit(d.proc.pid, resource.RLIMIT_AS)
            resource.prlimit(d.proc.pid, resource.RLIMIT_AS, (vm + (96 << 20), hard))
            c0 = d.counters()
            d.put(KEY2, os.urandom(48 << 20))
            c1 = d.counters()
            assert c1["errors"] == c0["errors"] + 1 and c1["breaker_open"] == 1, (c0, c1)
            resource.prlimit(d.proc.pid, resource.RLIMIT_AS, (hard, hard))
            assert d.get(KEY)[0] == "hit", d.counters()
            assert d.counters()["breaker_open"] == 0
        finally:
            err = d.close()
        assert "answers again" in err, err


def _slow(make_slow):
    with _setup() as r:
        d = Drive(r.url, r.tmp, "--timeout", "50")
        try:
            r.set("ptxcache:" + KEY, seal(KEY, b"ptx"))
            # A hit first (retried: on a loaded machine even a healthy
            # Redis may miss a 50 ms deadline).
            for _ in range(100):
                if d.get(KEY)[0] == "hit":
                    break
                d.cmd("sleep 50")
            else:
                raise AssertionError("no hit: %s" % d.counters())
            c0 = d.counters()
            waiter = make_slow(r)
            for _ in range(10):
                assert d.get(KEY)[0] == "miss"     # answered all the same
            c = d.counters()
            assert c["timeouts"] > c0["timeouts"], (c0, c)
            assert c["breaker_opens"] > c0["breaker_opens"] and c["breaker_open"] == 1, (c0, c)
            assert d.get(KEY) == ("miss", True)    # open: at once
            if waiter:
                waiter.join(30)
            for _ in range(200):
                if d.get(KEY)[0] == "hit":
                    break
                d.cmd("sleep 50")
            else:
                raise AssertionError("no recovery: %s" % d.counters())
            assert d.counters()["breaker_open"] == 0
        finally:
            d.close()


def test_l2_slow_redis_paused_clients():
    _slow(lambda r: r.pause(1500) and None)


def test_l2_slow_redis_server_asleep():
    _slow(lambda r: r.sleep(1.5))


def test_l2_read_only_publishes_nothing():
    with _setup() as r:
        ro, rw = Drive(r.url, r.tmp, "--read-only"), Drive(r.url, r.tmp)
        try:
            ro.put(KEY, b"from the read-only node")
            ro.cmd("sleep 200")
            assert r.keys() == [] and r.calls("set") == 0
            assert ro.counters()["writes"] == 0
            _published(rw, r, KEY, b"from a publishing node")
            assert ro.get(KEY)[0] == "hit"          # it still consumes
        finally:
            ro.close()
            rw.close()


def test_l2_prefix_namespaces_keys():
    with _setup() as r:
        a, b = Drive(r.url, r.tmp, "--prefix", "team-a:"), Drive(r.url, r.tmp)
        try:
            before = a.counters()["writes"]
            a.put(KEY, b"ptx")
            a.wait(lambda c: c["writes"] == before + 1, "the write")
            assert r.keys() == ["team-a:" + KEY]
            assert b.get(KEY)[0] == "miss"
            assert a.get(KEY)[0] == "hit"
        finally:
            a.close()
            b.close()


def test_l2_tcp_select_and_documented_acl():
    """redis://user:password@host:port/db, with the ACL README.md gives."""
    with RedisServer(tcp=True) as r:
        if not os.path.exists(L2DRIVE):
            raise AssertionError("%s not built" % L2DRIVE)
        r.command("ACL", "SETUSER", "ptxcache", "on", ">pw 1", "resetkeys", "~ptxcache:*",
                  "resetchannels", "-@all", "+getrange", "+set", "+select")
        d = Drive(r.tcp_url(db=3, user="ptxcache", password="pw%201"), r.tmp)
        bad = Drive(r.tcp_url(db=3, user="ptxcache", password="hunter2"), r.tmp)
        try:
            before = d.counters()["writes"]
            d.put(KEY, b"over tcp")
            d.wait(lambda c: c["writes"] == before + 1, "the write")
            assert r.keys(db=3) == ["ptxcache:" + KEY] and r.keys() == []
            assert d.get(KEY)[0] == "hit"
            assert d.counters()["errors"] == 0
            # Wrong password: errors, then the breaker; never a hit.
            for _ in range(5):
                assert bad.get(KEY)[0] == "miss"
            c = bad.counters()
            assert c["errors"] == 5 and c["breaker_open"] == 1, c
        finally:
            d.close()
            err = bad.close()
        assert "hunter2" not in err, err
