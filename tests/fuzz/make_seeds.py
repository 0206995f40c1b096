#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Writes the seed corpus of the fuzz harnesses (tests/fuzz/corpus/): frame
streams for fuzz_frame, request bodies for fuzz_request, components texts
for fuzz_flat, and for
fuzz_cubin_debug SOURCES\0PTX\0CUBIN triples: small corpus kernels at
fresh paths with the cubin the real ptxas wrote for them, then the same
cut short and with header bytes changed (needs ptxas and `make corpus`;
without them that set is left as it is). Run once and commit
the output; `make test` replays it and `make fuzz` starts from it. Rerunning
rewrites the same files (names are a digest of the content); files named
regress-* are inputs that once found a bug, kept as they are.

usage: tests/fuzz/make_seeds.py
"""
import hashlib
import os
import struct

HERE = os.path.dirname(os.path.abspath(__file__))


def pack(o, wide=False):
    """msgpack: compact encodings like msgpack-c's, or the widest ones."""
    if o is None:
        return b"\xc0"
    if o is True:
        return b"\xc3"
    if o is False:
        return b"\xc2"
    if isinstance(o, float):
        return b"\xcb" + struct.pack(">d", o)
    if isinstance(o, int):
        if wide:
            return (b"\xcf" + struct.pack(">Q", o)) if o >= 0 else (b"\xd3" + struct.pack(">q", o))
        if 0 <= o < 128:
            return bytes([o])
        if -32 <= o < 0:
            return struct.pack(">b", o)
        if 0 <= o < 1 << 8:
            return b"\xcc" + bytes([o])
        if 0 <= o < 1 << 16:
            return b"\xcd" + struct.pack(">H", o)
        if 0 <= o < 1 << 32:
            return b"\xce" + struct.pack(">I", o)
        if o >= 0:
            return b"\xcf" + struct.pack(">Q", o)
        return b"\xd3" + struct.pack(">q", o)
    if isinstance(o, str):
        b = o.encode()
        if wide:
            return b"\xdb" + struct.pack(">I", len(b)) + b
        if len(b) < 32:
            return bytes([0xa0 | len(b)]) + b
        if len(b) < 256:
            return b"\xd9" + bytes([len(b)]) + b
        return b"\xda" + struct.pack(">H", len(b)) + b
    if isinstance(o, (bytes, bytearray)):
        if wide or len(o) >= 1 << 16:
            return b"\xc6" + struct.pack(">I", len(o)) + bytes(o)
        if len(o) < 256:
            return b"\xc4" + bytes([len(o)]) + bytes(o)
        return b"\xc5" + struct.pack(">H", len(o)) + bytes(o)
    if isinstance(o, (list, tuple)):
        body = b"".join(pack(x, wide) for x in o)
        if wide:
            return b"\xdd" + struct.pack(">I", len(o)) + body
        return (bytes([0x90 | len(o)]) if len(o) < 16 else b"\xdc" + struct.pack(">H", len(o))) + body
    if isinstance(o, dict):
        body = b"".join(pack(k, wide) + pack(v, wide) for k, v in o.items())
        if wide:
            return b"\xdf" + struct.pack(">I", len(o)) + body
        return (bytes([0x80 | len(o)]) if len(o) < 16 else b"\xde" + struct.pack(">H", len(o))) + body
    raise TypeError(o)


def frame(ftype, body, version=1, magic=b"PX", length=None):
    n = len(body) if length is None else length
    return magic + bytes([version, ftype]) + struct.pack(">I", n) + body


IR = b"""target triple = "nvptx64-nvidia-cuda"
define ptx_kernel void @k(ptr addrspace(1) %a) {
  store float 1.0, ptr addrspace(1) %a
  ret void
}
"""

COMPILE = {"id": 3, "input": IR, "kind": "ptx", "triple": "nvptx64-nvidia-cuda",
           "cpu": "sm_90a", "features": "+ptx90", "opt": 3, "emit": True,
           "strict": False, "pipeline": "default<O3>", "options": ["-nvptx-fma-level=1"]}


def requests():
    """Request bodies: good ones, every field with every wrong type, bombs."""
    out = [COMPILE, {"id": 1}, {}, {"id": 2, "input": "text input"},
           {"id": 4, "input": b"", "kind": "cubin", "input_kind": "ptx", "backend": "ptxas",
            "asm_args": ["--gpu-name", "sm_90a", "-O3"]},
           {"id": 5, "kind": "ptx", "arch": "sm_90a", "older_than": 3600, "min_bytes": 0,
            "limit": 10},
           {"id": 6, "key": "ab" * 32}, {"id": 7, "max_size": 1 << 40, "all": True},
           {"id": -1}, {"id": (1 << 64) - 1}, {"id": 1.5}, {"id": None, "input": None},
           {"id": 8, "ns": "triton", "key": "k" * 64, "lease": True, "wait_ms": 1000},
           {"id": 9, "ns": "inductor-fx", "key": "k", "value": b"v" * 100, "lease": 3},
           {"id": 10, "lease": 7}, {"id": 11, "kind": "artifact", "namespace": "triton"},
           {"id": 12, "ns": "x" * 33, "key": "k" * 1025, "value": "not bin", "wait_ms": -1}]
    wrong = [None, True, 0, -1, (1 << 63), -(1 << 63), 1.0, "", "x\ny", "a\0b", b"\0",
             [], ["-a"], ["x"] * 33, {}, {"a": 1}]
    for field in ("id", "input", "kind", "triple", "march", "cpu", "features", "opt", "emit",
                  "strict", "pipeline", "options", "input_kind", "backend", "asm_args"):
        for w in wrong:
            r = dict(COMPILE)
            r[field] = w
            out.append(r)
    out.append(dict(COMPILE, options=["-" + "x" * 300]))
    out.append(dict(COMPILE, cpu="s" * 65, pipeline="p" * 4097))
    raw = [pack(r) for r in out] + [pack(COMPILE, wide=True), pack({"id": 1}, wide=True)]
    # Duplicate keys, non-string keys, and a key holding a NUL.
    raw.append(b"\x83" + pack("id") + b"\x01" + pack("id") + b"\x02" + pack("cpu") + pack("x"))
    raw.append(b"\x82" + b"\x01\x02" + pack([1]) + pack({}))
    raw.append(b"\x81" + pack("cp\0u") + pack("sm_90a"))
    # Bombs and malformed bodies.
    raw += [b"\xdd\xff\xff\xff\xff", b"\xdf\xff\xff\xff\xff", b"\xdc\xff\xff" + b"\x00" * 10,
            b"\xc6\xff\xff\xff\xff", b"\xdb\x7f\xff\xff\xff abc", b"\xc4\x05ab",
            b"\x91" * 10 + b"\x00", b"\x81\xa1a" + b"\x91" * 3 + b"\x80",
            b"\x81\xa1a" + b"\x91" * 4 + b"\x80", pack({"id": 1}) + b"\x00", b"",
            b"\xc1", b"\xd4\x01\x02", b"\xc7\x01\x01\x00", b"\x92\x01\x02",
            b"\x81\xa1a\x95" + b"\x80" * 5, b"\x8f" + b"\x00" * 30,
            b"\xde\x00\x03" + b"\x01\x02" * 3, b"\xcb" + b"\x00" * 8,
            b"\x81\xa2id\xd0\xff", b"\x81\xa2id\xcf" + b"\xff" * 8]
    for i in range(1, 9):
        raw.append(pack(COMPILE)[:len(pack(COMPILE)) * i // 9])   # truncations
    return raw


def frames():
    """Byte streams on a connection: frames, several per stream, and damage."""
    c = pack(COMPILE)
    out = [frame(3, c), frame(1, pack({"id": 1})), frame(2, pack({"id": 2})),
           frame(4, pack({"id": 3})), frame(9, pack({"id": 4, "all": True})),
           frame(0x42, pack({"id": 5})), frame(0xff, pack({"id": 0, "code": "x"})),
           frame(2, pack({"id": 1})) + frame(3, c) + frame(4, pack({"id": 9})),
           frame(2, pack({"id": 1})) * 20,
           frame(3, b"", version=9), frame(3, b"", magic=b"GE"),
           b"GET / HTTP/1.0\r\n\r\n", b"PX\x01\x03\xff\xff\xff\xff",
           b"PX\x01\x03\x00\x01\x00\x01" + b"\x80", b"PX\x01", b"PX",
           frame(3, b"\xdd\xff\xff\xff\xff"), frame(3, pack({"id": 1}) + b"x"),
           frame(3, b"\x81" * 200 + b"\x00"), frame(3, pack({"id": 1}), length=2),
           frame(2, pack({"id": 1})) + b"PX\x01\x02\x00\x00\x00\x09" + b"\x81",
           frame(3, b""), frame(3, b"\x80"), frame(3, b"\xc0"),
           frame(2, pack({"id": 1})) + b"XX" + b"\x00" * 6,
           frame(10, pack({"id": 1, "ns": "triton", "key": "k", "lease": True})) +
           frame(11, pack({"id": 2, "ns": "triton", "key": "k", "value": b"v", "lease": 1})) +
           frame(12, pack({"id": 3, "lease": 1})),
           # A put whose value is last, as a bin32: conn.c's spooling.
           frame(11, pack({"id": 4, "ns": "t", "key": "k", "lease": 1, "value": b"v" * 300},
                          wide=True))]
    for i in range(1, 8):
        out.append(frame(3, c)[:len(frame(3, c)) * i // 8])
    return out


def write(kind, items):
    d = os.path.join(HERE, "corpus", kind)
    os.makedirs(d, exist_ok=True)
    for old in os.listdir(d):
        if not old.startswith("regress-"):     # inputs that once crashed: kept
            os.unlink(os.path.join(d, old))
    for data in items:
        name = hashlib.sha1(data).hexdigest()[:16]
        with open(os.path.join(d, name), "wb") as f:
            f.write(data)
    return len(set(items))


def cubin_debug_seeds():
    import re
    import subprocess
    import tempfile
    ptxas = "/usr/local/cuda/bin/ptxas"
    corpus = os.path.join(HERE, "..", "..", "build", "corpus", "triton")
    if not os.path.exists(ptxas) or not os.path.isdir(corpus):
        return None
    ptxs = sorted((os.path.getsize(os.path.join(corpus, f)), f) for f in os.listdir(corpus)
                  if f.endswith(".triton.ptx"))
    out = []
    with tempfile.TemporaryDirectory() as t:
        for _, f in ptxs[:2]:
            text = open(os.path.join(corpus, f), "rb").read()
            path = re.search(rb'\.file\t1 "([^"]*)"', text).group(1)
            for variant, (size, mtime) in enumerate([(4, 1700000000), (None, 0)]):
                src = "/tmp/icache/zb/seed%d.py" % variant
                ptx = text.replace(b'"' + path + b'"', b'"' + src.encode() + b'"')
                p = os.path.join(t, "k.ptx")
                with open(p, "wb") as fo:
                    fo.write(ptx.replace(b'"' + src.encode() + b'"', b'"' + src.encode() + b'"'
                                         + (b", %d, %d" % (mtime, size) if size else b", 0, 0")))
                subprocess.run([ptxas, "-lineinfo", "--gpu-name=sm_90a", p, "-o", p + ".o"],
                               check=True)
                cubin = open(p + ".o", "rb").read()
                stamp = b"%d:%d" % (mtime, size) if size else b"-"
                head = src.encode() + b"\t" + stamp + b"\n\0" + ptx + b"\0"
                out.append(head + cubin)
                if variant:
                    continue
                for cut in (0, 16, 64, len(cubin) // 2, len(cubin) - 1):
                    out.append(head + cubin[:cut])
                # header bytes changed: the ELF's and the line table's
                sh = struct.unpack_from("<Q", cubin, 0x28)[0]
                for off in (4, 5, 0x28, 0x3a, 0x3c, 0x3e, sh + 64 + 0x18, sh + 64 + 0x20):
                    if off < len(cubin):
                        b = bytearray(cubin)
                        b[off] ^= 0xff
                        out.append(head + bytes(b))
        # The corpus's own paths, which its DWARF spells too (runs), and the
        # layouts of other targets (sm_80's REL relocations, sm_100a's
        # second line table and sections naming another's bytes).
        for _, f in ptxs[:1]:
            text = open(os.path.join(corpus, f), "rb").read()
            path = re.search(rb'\.file\t1 "([^"]*)"', text).group(1)
            for arch in (b"sm_90a", b"sm_80", b"sm_100a"):
                ptx = re.sub(rb"\.target\s+sm_90a", b".target " + arch, text)
                p = os.path.join(t, "k.ptx")
                with open(p, "wb") as fo:
                    fo.write(ptx.replace(b'"' + path + b'"', b'"' + path + b'", 1700000000, 4'))
                r = subprocess.run([ptxas, "-lineinfo", "--gpu-name=" + arch.decode(), p, "-o",
                                    p + ".o"], capture_output=True)
                if r.returncode == 0:
                    out.append(path + b"\t1700000000:4\n\0" + ptx + b"\0" +
                               open(p + ".o", "rb").read())
        out.append(b"\0\0")
        out.append(b"/a/b.py\t-\n\0\t.file\t1 \"/a/b.py\"\n.section .debug_info\n{\n.b8 98\n.b8 46\n"
                   b".b8 112\n.b8 121\n.b8 0\n}\n\0\x7fELF")
    return out


def flat_seeds():
    """Components texts as key.c writes them (one of each kind), then the
    same cut short, with escapes, other scalars, nesting, duplicates and
    too many fields."""
    real = [
        b'{"key_schema":"1","kind":"ptx","compiler":"LLVM 22.1.8 (NVPTX back end, static, host '
        b'x86_64-pc-linux-gnu)","input_sha256":"b8833ac87eaabd0fd4e30eb88a4674de073d3e982c9653b0'
        b'8b7cf9e005d1efb5","triple":"","march":"","cpu":"sm_90a","features":"","opt":"3",'
        b'"pipeline":"","emit":"1","strict":"1","options":""}',
        b'{"key_schema":"1","kind":"artifact","scope":"u0","namespace":"triton","key":"k/1"}',
        b'{"key_schema":"1","kind":"cubin","assembler":"ptxas 13.0.88","ptx_sha256":"00ff",'
        b'"arch":"sm_90a","options":"-O3 -lineinfo","paths":"portable"}',
        b'{"kind":"artifact","from":"l2"}',
    ]
    out = list(real)
    for r in real[:2]:
        out += [r[:i] for i in (0, 1, 2, 10, len(r) // 2, len(r) - 1)]
    out += [
        b'{}', b' { } ', b'{} x', b'{"a":1}', b'{"a":-1.5e+3,"b":true,"c":false,"d":null}',
        b'{"a":"\\u00e9\\n\\"q\\""}', b'{"a":"\\u00zz"}', b'{"a":"\\x"}',
        b'{"a":{"b":1}}', b'{"a":[1]}', b'{"a":1,"a":2}', b'{"a":1,}', b'{"a" 1}', b'{"a":}',
        b'{"a":"\x01"}', b'{"a":"b"', b'["a"]', b'{"\\"":"x"}',
        b'{' + b','.join(b'"k%d":%d' % (i, i) for i in range(64)) + b'}',
        b'{' + b','.join(b'"k%d":%d' % (i, i) for i in range(65)) + b'}',
    ]
    return out


if __name__ == "__main__":
    print("frame: %d seeds, request: %d seeds" % (write("frame", frames()), write("request", requests())))
    print("flat: %d seeds" % write("flat", flat_seeds()))
    cd = cubin_debug_seeds()
    if cd is not None:
        print("cubin_debug: %d seeds" % write("cubin_debug", cd))
