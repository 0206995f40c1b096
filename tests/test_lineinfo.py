# SPDX-License-Identifier: Apache-2.0
"""Portable -lineinfo cubins (daemon/cubin_debug.c): the cubin stage keyed
on the PTX without its source paths, each client's paths, mtimes and sizes
written back into the cached cubin's line table.

The oracle is the real ptxas: every answer of the front must equal, byte
for byte, what ptxas writes for that client's own PTX and files. Skipped
where there is no ptxas (CUDA absent), as in test_cubin.py."""
import json
import os
import re
import shutil
import subprocess
import tempfile

from harness import TRITON_FLAGS, Daemon, corpus, llc
from test_cubin import Front, read, real_ptxas, unvary

M0 = 1700000000          # an mtime of 5 ULEB128 bytes
DIFILE = re.compile(rb'!DIFile\(filename: "([^"]*)", directory: "([^"]*)"')


def write_source(path, size, mtime):
    """A source file of size bytes and the given mtime; size None: none."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    if size is None:
        if os.path.exists(path):
            os.unlink(path)
        return
    with open(path, "wb") as f:
        f.write(b"#" * size)
    os.utime(path, (mtime, mtime))


def ir_with_paths(ir, paths):
    """The IR with its i-th DIFile naming paths[i] (directory, file name)."""
    it = iter(paths)

    def sub(m):
        d, n = next(it)
        return b'!DIFile(filename: "%s", directory: "%s"' % (n.encode(), d.encode())
    return DIFILE.sub(sub, ir)


def ptx_from_ir(ir, keep_debug=False):
    """llc's PTX for ir; as Triton does, without `, debug` on .target
    (with it, ptxas copies .debug_info, paths and all, into the cubin)."""
    r = llc(TRITON_FLAGS + ["-o", "-"], input=ir)
    assert r.returncode == 0, r.stderr
    assert b".file" in r.stdout and b".debug_info" in r.stdout
    if keep_debug:
        return r.stdout
    out = re.sub(rb"(\.target\s+[^,\n]+), debug", rb"\1", r.stdout)
    assert out != r.stdout
    return out


def both(real, front, ptx_path, out, extra=("-lineinfo",)):
    """The real ptxas's cubin and the front's for the same call."""
    args = list(extra) + ["-v", "--gpu-name=sm_90a", ptx_path, "-o", out]
    w = subprocess.run([real] + args, capture_output=True, timeout=300)
    assert w.returncode == 0, w.stderr
    want = read(out)
    os.unlink(out)
    g = front.run(args)
    assert g.returncode == 0, g.stderr
    assert unvary(g.stderr) == unvary(w.stderr), (g.stderr, w.stderr)
    return want, read(out)


# (name, directory of the generated file, its name, size, mtime): each is a
# variation of the first, and a hit (tests/test_reloc.py widens this).
def variations(base_dir, name):
    stem, ext = os.path.splitext(name)
    other = "q" * len(stem) + ext
    return [
        ("base", base_dir + "/aa", name, 5000, M0),
        ("dir same length", base_dir + "/bb", name, 5000, M0),
        ("dir longer", base_dir + "/bbbbbb", name, 5000, M0),
        ("dir shorter", base_dir + "/b", name, 5000, M0),
        ("name same length", base_dir + "/cc", other, 5000, M0),
        ("name longer", base_dir + "/cc", "x" + other, 5000, M0),
        ("mtime same ULEB length", base_dir + "/aa", name, 5000, M0 + 12345),
        ("mtime other ULEB length", base_dir + "/aa", name, 5000, 100),
        ("size same ULEB length", base_dir + "/aa", name, 6000, M0),
        ("size other ULEB length", base_dir + "/aa", name, 100, M0),
        ("missing file", base_dir + "/aa", name, None, M0),
        ("again, fresh dir same length", base_dir + "/dd", name, 5000, M0 + 1),
    ]


def run_oracle(d, front, t, ptx_for, base_dir, name, extra_files=()):
    """Every variation through the real ptxas and the front: identical
    bytes each time; every one after the first a hit, whatever the lengths
    of its paths and stamps. Returns the number of variations and hits."""
    hits, n = 0, 0
    s0 = d.stats()
    for label, dr, nm, size, mtime in variations(base_dir, name):
        src = os.path.join(dr, nm)
        write_source(src, size, mtime)
        for p, sz in extra_files:
            write_source(p, sz, M0)
        ptx = os.path.join(t, "in-%d.ptx" % n)
        with open(ptx, "wb") as f:
            f.write(ptx_for(dr, nm))
        before = d.stats()
        want, got = both(real_ptxas(), front, ptx, ptx + ".o")
        assert got == want, "%s: the front's cubin differs from ptxas's" % label
        after = d.stats()
        expect_hit = n > 0
        got_hit = after["lineinfo_hits"] - before["lineinfo_hits"] == 1
        assert got_hit == expect_hit, (label, before, after)
        hits += expect_hit
        n += 1
        if size is not None:
            os.unlink(src)
    s1 = d.stats()
    assert s1["compiles"] - s0["compiles"] == n - hits, (s0, s1)
    return n, hits


def test_lineinfo_oracle_variations_from_own_ir():
    """PTX the project compiles from IR with debug info (a one-file and a
    three-file kernel of the corpus), under variations of directory, file
    name, mtime, size and a missing file, of the same and of other lengths:
    the front's cubin is the real ptxas's every time, and every variation
    after the first is a hit."""
    real_ptxas()
    total = hits = 0
    with Daemon(workers=2) as d, tempfile.TemporaryDirectory() as t:
        front = Front(t, d.socket)
        for k in ("002_", "061_"):
            ll = [p for p in corpus(".ll") if os.path.basename(p).startswith(k)][0]
            ir = read(ll)
            files = DIFILE.findall(ir)
            name = files[0][0].decode()
            # the library files of a multi-file kernel, moved under t
            lib = [(os.path.join(t, "lib%d" % i, dr.decode().strip("/")), fn.decode())
                   for i, (fn, dr) in enumerate(files[1:])]
            extra = [(os.path.join(dr, fn), 1234) for dr, fn in lib[:1]]   # one present, one missing

            def ptx_for(dr, nm, ir=ir, lib=lib):
                return ptx_from_ir(ir_with_paths(ir, [(dr, nm)] + lib))
            n, h = run_oracle(d, front, t, ptx_for, os.path.join(t, k), name, extra)
            total += n
            hits += h
        s = d.stats()
        assert s["lineinfo_hits"] == hits and hits >= 20, s
        assert s["lineinfo_layout_misses"] == 0 and s["lineinfo_unportable"] == 0, s
        print("oracle: %d variations, all byte-identical, %d hits" % (total, hits))


def test_lineinfo_oracle_triton_ptx_same_length_paths():
    """Triton's own PTX from the corpus, with its cache directory and file
    name swapped for others of the same length (in .file and in the DWARF
    byte lists) and fresh source files: one compile per kernel, every other
    copy a hit, each byte-identical to the real ptxas's cubin."""
    real = real_ptxas()
    kernels = [k for k in corpus(".triton.ptx") if b"/tmp/icache/" in read(k)][::12]
    tag = os.urandom(4).hex()
    made = []
    try:
        with Daemon(workers=2) as d, tempfile.TemporaryDirectory() as t:
            front = Front(t, d.socket)
            for i, k in enumerate(kernels):
                text = read(k)
                path = re.search(rb'\.file\t1 "([^"]*)"', text).group(1).decode()
                dr, nm = os.path.split(path)
                for j, (cache, stamp) in enumerate([("a", M0), ("b", M0 + 7), ("c", M0 + 99)]):
                    # a directory of the same length (Triton's is under /tmp)
                    new_dr = ("/tmp/%s%x%s" % (cache, i, tag) + "x" * len(dr))[:len(dr)]
                    assert new_dr.count("/") == 2 and new_dr not in made
                    made.append(new_dr)
                    new_nm = ("%s%d" % (cache, i) + nm)[:len(nm)]
                    write_source(os.path.join(new_dr, new_nm), 777, stamp)
                    ptx = os.path.join(t, "k%d-%d.ptx" % (i, j))
                    with open(ptx, "wb") as f:
                        f.write(swap_paths(text, dr, nm, new_dr, new_nm))
                    want, got = both(real, front, ptx, ptx + ".o")
                    assert got == want, "%s copy %d differs from ptxas's" % (k, j)
                    shutil.rmtree(new_dr)
            s = d.stats()
            assert s["compiles"] == len(kernels), s
            assert s["lineinfo_hits"] == 2 * len(kernels), s
    finally:
        for p in made:
            shutil.rmtree(p, ignore_errors=True)


def swap_paths(text, dr, nm, new_dr, new_nm):
    """Triton's PTX for the same kernel at another path: the .file string
    and the directory and name byte lists in .debug_info. Only for paths
    of the same lengths (DWARF lengths and comments stay)."""
    assert len(dr) == len(new_dr) and len(nm) == len(new_nm)
    text = text.replace(('"%s/%s"' % (dr, nm)).encode(), ('"%s/%s"' % (new_dr, new_nm)).encode())
    lines = text.split(b"\n")
    for old, new in ((dr, new_dr), (nm, new_nm)):
        want = [b".b8 %d" % c for c in old.encode()]
        for s in range(len(lines)):
            if all(lines[s + i].startswith(w) and not lines[s + i][len(w):len(w) + 1].isdigit()
                   for i, w in enumerate(want) if s + i < len(lines)) and s + len(want) < len(lines):
                for i, c in enumerate(new.encode()):
                    lines[s + i] = re.sub(rb"^\.b8 \d+", b".b8 %d" % c, lines[s + i])
                break
        else:
            raise AssertionError("no byte list for %r" % old)
    return b"\n".join(lines)


def test_lineinfo_fresh_cache_dirs_one_compile():
    """Inductor's case: the same kernel from two fresh cache directories
    (same length, as every mkdtemp gives), its source file written anew
    each time: one compile; the second run is a hit with its own bytes."""
    real = real_ptxas()
    ll = corpus(".ll")[1]
    ir = read(ll)
    name = DIFILE.search(ir).group(1).decode()
    with Daemon() as d, tempfile.TemporaryDirectory() as t:
        front = Front(t, d.socket)
        outs = []
        for run in range(2):
            cache = tempfile.mkdtemp(prefix="torchinductor_", dir=t)
            src = os.path.join(cache, "zb", name)
            os.makedirs(os.path.dirname(src))
            with open(src, "w") as f:
                f.write("# generated kernel, run %d\n" % run)
            ptx = os.path.join(cache, "k.ptx")
            with open(ptx, "wb") as f:
                f.write(ptx_from_ir(ir_with_paths(ir, [(os.path.dirname(src), name)])))
            want, got = both(real, front, ptx, ptx + ".o")
            assert got == want
            outs.append(got)
        assert outs[0] != outs[1]       # each names its own directory
        s = d.stats()
        assert s["compiles"] == 1 and s["hits"] == 1 and s["lineinfo_hits"] == 1, s


def test_lineinfo_layout_miss_counted_explained_and_loose_opt_in():
    """A path of another length is a hit. Files that share a directory in
    one client's paths and not in another's are another layout: a miss
    with its own key, counted in lineinfo_layout_misses and named by
    explain (debug_layout); with lineinfo-loose it is a hit naming the
    first client's paths, counted in lineinfo_loose_hits."""
    real = real_ptxas()
    ll = [p for p in corpus(".ll") if os.path.basename(p).startswith("061_")][0]
    ir = read(ll)
    files = DIFILE.findall(ir)
    assert len(files) == 3
    names = [f[0].decode() for f in files]
    for loose in (False, True):
        extra = ["--lineinfo-loose", "yes"] if loose else []
        with Daemon(extra=extra) as d, tempfile.TemporaryDirectory() as t:
            front = Front(t, d.socket)
            got = []
            # Each file in a directory of its own (two of other lengths),
            # then all three in one.
            for dirs in (("/aa", "/l1", "/l2"), ("/aaaaaaa", "/lib1", "/lib2222"),
                         ("/cc", "/cc", "/cc")):
                paths = [(t + dr, nm) for dr, nm in zip(dirs, names)]
                for dr, nm in paths:
                    write_source(os.path.join(dr, nm), 300, M0)
                ptx = os.path.join(t, "k%d.ptx" % len(got))
                with open(ptx, "wb") as f:
                    f.write(ptx_from_ir(ir_with_paths(ir, paths)))
                if loose:
                    r = front.run(["-lineinfo", "--gpu-name=sm_90a", ptx, "-o", ptx + ".o"])
                    assert r.returncode == 0, r.stderr
                    got.append(read(ptx + ".o"))
                else:
                    want, g = both(real, front, ptx, ptx + ".o")
                    assert g == want
                    got.append(g)
            s = d.stats()
            assert s["lineinfo_loose"] is loose, s
            assert s["lineinfo_hits"] == 1, s
            if loose:
                assert s["compiles"] == 1 and s["lineinfo_loose_hits"] == 1, s
                assert got[2] == got[0]         # the first client's paths, as opted in
            else:
                assert s["compiles"] == 2 and s["lineinfo_layout_misses"] == 1, s
                assert s["lineinfo_loose_hits"] == 0
                e = json.loads(d.cli("explain", "--json", "--ptxas", "-lineinfo", "-v",
                                     "--gpu-name=sm_90a", ptx).stdout)
                assert e["cached"] is True, e
                src = os.path.join(t + "/cc", names[0])
                os.utime(src, (5, 5))    # a stamp of another length: still a hit
                e = json.loads(d.cli("explain", "--json", "--ptxas", "-lineinfo", "-v",
                                     "--gpu-name=sm_90a", ptx).stdout)
                assert e["cached"] is True, e
                shutil.rmtree(t + "/cc")
                paths = [(t + "/cc", names[0]), (t + "/cc", names[1]), (t + "/dd", names[2])]
                with open(ptx, "wb") as f:
                    f.write(ptx_from_ir(ir_with_paths(ir, paths)))
                e = json.loads(d.cli("explain", "--json", "--ptxas", "-lineinfo", "-v",
                                     "--gpu-name=sm_90a", ptx).stdout)
                assert e["cached"] is False, e
                differing = [x["name"] for x in e["nearest"]["differing"]]
                assert differing == ["debug_layout"], e
            cfg = subprocess.run([d.args[0], "--print-config"] + extra, capture_output=True,
                                 text=True).stdout
            assert re.search(r"lineinfo-loose\s*=\s*%s" % ("yes" if loose else "no"), cfg), cfg


def test_lineinfo_odd_ptx_stays_exact():
    """PTX this file does not take apart (explicit stamps, a relative or
    escaped path, control bytes, a stamp-less duplicate) is keyed on its
    bytes as before: still the real ptxas's cubin, never a rewrite."""
    real = real_ptxas()
    k = corpus(".triton.ptx")[0]
    text = read(k)
    path = re.search(rb'\.file\t1 "([^"]*)"', text).group(1)
    with Daemon() as d, tempfile.TemporaryDirectory() as t:
        front = Front(t, d.socket)
        odd = [
            text.replace(b'"' + path + b'"', b'"' + path + b'", 1700000000, 42'),
            text.replace(b'"' + path + b'"', b'"' + t.encode() + b'/x\\\\y.py"'),
            text.replace(b'"' + path + b'"', b'"' + t.encode() + b'/a.py"') + b"\n// \x01\n",
            text.replace(b'"' + path + b'"', b'"' + t.encode() + b'/a.py"\n\t.file\t2 "'
                         + t.encode() + b'/a.py"'),
        ]
        for i, p in enumerate(odd):
            ptx = os.path.join(t, "odd%d.ptx" % i)
            with open(ptx, "wb") as f:
                f.write(p)
            want, got = both(real, front, ptx, ptx + ".o")
            assert got == want, i
        s = d.stats()
        assert s["lineinfo_hits"] == 0 and s["compiles"] == len(odd), s


def test_lineinfo_second_node_hits_through_redis_with_its_own_paths():
    """Across nodes: node 1 assembles a -lineinfo kernel for its cache dir;
    node 2, with an empty cache and another cache dir of the same length,
    gets it from Redis (canonical paths in the shared value) with its own
    paths and stamps written in, byte-identical to its own ptxas."""
    from redis_fixture import RedisServer
    from test_l2 import node, wait_for
    real = real_ptxas()
    ir = read(corpus(".ll")[1])
    name = DIFILE.search(ir).group(1).decode()
    with RedisServer() as r, tempfile.TemporaryDirectory() as t:
        outs = []
        for i, dr in enumerate(("/node1", "/node2")):
            with node(r, t) as d:
                front = Front(t, d.socket)
                src = t + dr + "/zb/" + name
                write_source(src, 4321, M0 + i)
                ptx = os.path.join(t, "k%d.ptx" % i)
                with open(ptx, "wb") as f:
                    f.write(ptx_from_ir(ir_with_paths(ir, [(os.path.dirname(src), name)])))
                want, got = both(real, front, ptx, ptx + ".o")
                assert got == want
                outs.append(got)
                s = d.stats()
                if i == 0:
                    assert s["compiles"] == 1, s
                    wait_for(lambda: d.stats()["l2_writes"] >= 1, "the write to Redis")
                else:
                    assert s["compiles"] == 0 and s["l2_hits"] == 1, s
        assert outs[0] != outs[1]
        assert not any(t.encode() in v for k in r.keys("ptxcache:*") for v in [r.get(k)]), \
            "a client's path reached the shared tier"
