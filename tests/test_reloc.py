# SPDX-License-Identifier: Apache-2.0
"""Portable -lineinfo cubins relocated to paths and stamps of any length
(daemon/cubin_debug_elf.c's dbg_rewrite()): the widened oracle.

A client's source paths and stamps may have any lengths: /tmp/torchinductor_
alice and /tmp/torchinductor_bob, file names of 1 to 250 bytes, directories
of 2 to 600, mtimes and sizes of every ULEB128 length, files present or
missing, one to three .file directives sharing directories or not. Every
cubin the cache lays out for such a client must be byte for byte the one the
real ptxas writes for that client's own PTX and files.

Two levels: build/relocdrive runs cubin_debug.c and cubin_debug_elf.c
alone (the store's layout for the canonical view, then each client's
layout from it) against the real
ptxas over the corpus, fast; the daemon, through the ptxas front, shows the
same as hits. The client PTX comes from the corpus IR through llc (each
DIFile given the client's paths) and from Triton's own PTX through
retarget_ptx() (checked against llc first). The whole corpus runs with
PTXCACHE_RELOC_FULL=1; `make test` takes a subset. Skipped where
there is no ptxas (CUDA absent), as in test_cubin.py.
"""
import os
import random
import re
import shutil
import subprocess
import tempfile

import harness
from harness import TRITON_FLAGS, Daemon, corpus, llc
from test_cubin import Front, read, real_ptxas, unvary
from test_lineinfo import DIFILE, ir_with_paths

RELOCDRIVE = os.path.join(harness.BUILD, "relocdrive")
FULL = os.environ.get("PTXCACHE_RELOC_FULL") == "1"

# Stamps of every ULEB128 length ptxas writes (it keeps 32 bits): 1 to 5 bytes.
MTIMES = [0, 1, 127, 128, 16383, 16384, 2**21 - 1, 2**21, 2**28 - 1, 2**28,
          1700000000, 2**32 - 1]
SIZES = [0, 1, 127, 128, 16383, 16384, 2**21 - 1, 2**21, 2**28 - 1, 2**28, 2**31,
         2**32 - 1]
DIR_LENS = [2, 5, 40, 100, 255, 256, 400, 600]
NAME_LENS = [1, 2, 10, 52, 127, 128, 200, 250]
FILE_LINE = re.compile(rb'^(\s*\.file\s+(\d+)\s+")([^"]*)(".*)$')


def stamp_line(path):
    """What the ptxas front sends for a source file (client/ptxas.c)."""
    try:
        st = os.stat(path)
    except OSError:
        return "%s\t-\n" % path
    return "%s\t%d:%d\n" % (path, int(st.st_mtime), st.st_size)


def relocdrive(*args):
    if not os.path.exists(RELOCDRIVE):
        raise AssertionError("%s missing: run make" % RELOCDRIVE)
    r = subprocess.run([RELOCDRIVE] + list(args), capture_output=True, text=True, timeout=600)
    return r.returncode, r.stdout.splitlines(), r.stderr


# ---- client PTX --------------------------------------------------------

def file_paths(text):
    """The .file paths of a PTX, in index order."""
    found = sorted((int(m.group(2)), m.group(3).decode())
                   for m in map(FILE_LINE.match, text.split(b"\n")) if m)
    return [p for _, p in found]


def retarget_ptx(text, new):
    """LLVM's PTX for the same kernel with its i-th .file naming new[i]
    (directory, name): the .file strings, the DWARF byte lists spelling a
    directory or name, the unit length and the DIE offsets after them, as
    llc writes them (comments left as they were; ptxas ignores them)."""
    old = [os.path.split(p) for p in file_paths(text)]
    assert len(old) == len(new), (old, new)
    # Line tables only: the compile unit's name and directory, the first
    # file's, are the strings that spell paths.
    swap = {old[0][0].encode(): new[0][0].encode(), old[0][1].encode(): new[0][1].encode()}
    lines = text.split(b"\n")
    for k, line in enumerate(lines):
        m = FILE_LINE.match(line)
        if m:
            i = file_paths(text).index(m.group(3).decode())
            lines[k] = m.group(1) + ("%s/%s" % new[i]).encode() + m.group(4)
    s = next(k for k, line in enumerate(lines) if re.match(rb"\s*\.section\s+\.debug_info", line))
    e = next(k for k in range(s + 1, len(lines)) if b"}" in lines[k])
    body = lines[s + 1:e]
    data = re.compile(rb"^\s*\.b(8|16|32|64)\s+(\S+)")
    byte = re.compile(rb"^\s*\.b8\s+(\d+)")

    def items(ls):
        """(line, offset) of each data line, and the section's size."""
        out, at = [], 0
        for k, line in enumerate(ls):
            m = data.match(line)
            if m:
                out.append((k, at))
                at += int(m.group(1)) // 8
        return out, at

    old_items, _ = items(body)
    # The byte lists: whole strings equal to an old directory or name.
    out, k, where = [], 0, {}
    while k < len(body):
        m = byte.match(body[k])
        if m and int(m.group(1)):
            j, s_ = k, b""
            while j < len(body) and byte.match(body[j]) and int(byte.match(body[j]).group(1)):
                s_ += bytes([int(byte.match(body[j]).group(1))])
                j += 1
            if s_ in swap and j < len(body) and byte.match(body[j]):
                comment = body[k][len(byte.match(body[k]).group(0)):]
                where[k] = len(out)
                out += [b".b8 %d" % c + (comment if i == 0 else b"") for i, c in
                        enumerate(swap[s_])]
            else:
                for i in range(k, j):
                    where[i] = len(out)
                    out.append(body[i])
            k = j
            continue
        where[k] = len(out)
        out.append(body[k])
        k += 1
    new_items, total = items(out)
    new_at = dict(new_items)
    moved = {off: new_at[where[k]] for k, off in old_items if where.get(k) in new_at}
    for n, (k, _) in enumerate(new_items):
        m = re.match(rb"^(\s*\.b32\s+)(\d+)(.*)$", out[k])
        if not m:
            continue
        if n == 0 and b"Length of Unit" in m.group(3):
            out[k] = m.group(1) + b"%d" % (total - 4) + m.group(3)
        elif re.search(rb"DW_AT_(abstract_origin|sibling|type|specification)", m.group(3)):
            out[k] = m.group(1) + b"%d" % moved[int(m.group(2))] + m.group(3)
    return b"\n".join(lines[:s + 1] + out + lines[e:])


def no_comments(text):
    return b"\n".join(re.sub(rb"\s*//.*$", b"", line).rstrip() for line in text.split(b"\n"))


def llc_ptx(ir, paths, cpu="sm_90a", ptx=None):
    """llc's PTX for ir with its i-th DIFile naming paths[i], as Triton
    runs it (no `, debug` on .target). None if llc refuses the target."""
    flags = TRITON_FLAGS if cpu == "sm_90a" else [
        "-O3", "-mtriple=nvptx64-nvidia-cuda", "-mcpu=" + cpu, "-mattr=+ptx%s" % (ptx or 88)]
    r = llc(flags + ["-o", "-"], input=ir_with_paths(ir, paths))
    if r.returncode != 0:
        return None
    return re.sub(rb"(\.target\s+[^,\n]+), debug", rb"\1", r.stdout)


# ---- clients -----------------------------------------------------------

def make_dir(root, length, tag, i):
    """A directory of length bytes: under root (real, made) where root is
    short enough, else one that does not exist (its files are missing).
    Returns (directory, real)."""
    if length < len(root) + len(tag) + 2:
        return ("/" + chr(ord("m") + i) + tag + "z" * length)[:length], False
    d = root + "/" + tag
    while length - len(d) >= 2:
        k = min(200, length - len(d) - 1)
        if length - len(d) - 1 - k == 1:
            k -= 1              # leave no single byte for a next component
        d += "/" + "d" * k
    return d + "e" * (length - len(d)), True


def client_files(rng, root, v, nfiles, shared, missing_every=5):
    """Paths and stamps of client v: nfiles files (shared: all in the first
    one's directory), each present with stamps from the lists or missing.
    Returns [(dir, name, mtime, size) or (dir, name, None, None)]."""
    out = []
    for i in range(nfiles):
        if shared and i:
            d, real = out[0][0], out[0][2] is not None
        else:
            d, real = make_dir(root, rng.choice(DIR_LENS), "v%df%d" % (v, i), i)
        n = rng.choice(NAME_LENS)
        name = ("n%d%d" % (v, i) + "x" * n)[:n] if n > 3 else "abcdefgh"[i:i + 1] * n
        if real and (v * 7 + i) % missing_every == missing_every - 1:
            real = False        # a file ptxas cannot read (0, 0)
        mt = MTIMES[(v * 5 + i * 3) % len(MTIMES)] if real else None
        sz = SIZES[(v * 7 + i * 5 + 3) % len(SIZES)] if real else None
        out.append((d, name, mt, sz))
    return out


def write_files(files):
    for d, n, mt, sz in files:
        p = os.path.join(d, n)
        if mt is None:
            if os.path.exists(p):
                os.unlink(p)
            continue
        os.makedirs(d, exist_ok=True)
        with open(p, "wb") as f:
            f.truncate(sz)              # sparse: 4 GiB takes no room
        os.utime(p, (mt, mt))


def sources(files):
    return "".join(stamp_line(os.path.join(d, n)) for d, n, _, _ in files)


def assemble(real, ptx_path, out, opts, arch="sm_90a"):
    r = subprocess.run([real] + list(opts) + ["--gpu-name=" + arch, ptx_path, "-o", out],
                       capture_output=True, timeout=600)
    assert r.returncode == 0, r.stderr
    return r


OPTIONS = [["-lineinfo"], ["-lineinfo", "-v"], [], ["-lineinfo", "--opt-level=1"]]


def oracle_family(real, t, tag, ptx_for, nfiles, shared, variations, opts, arch, rng):
    """One kernel, one directory grouping: client 0's cubin is laid out
    for the canonical view, then for every other client; each must be what
    ptxas wrote for that client. Returns the lines relocdrive printed."""
    args = []
    for v in range(variations):
        root = os.path.join(t, tag)
        files = client_files(rng, root, v, nfiles, shared)
        write_files(files)
        text = ptx_for([(d, n) for d, n, _, _ in files])
        if text is None:
            return None
        p = os.path.join(t, "%s-%d.ptx" % (tag, v))
        with open(p, "wb") as f:
            f.write(text)
        with open(p + ".src", "w") as f:
            f.write(sources(files))
        assemble(real, p, p + ".cubin", opts, arch)
        args += [p, p + ".src", p + ".cubin"]
        shutil.rmtree(root, ignore_errors=True)
    rc, out, err = relocdrive(*args)
    assert rc == 0 and len(out) == variations - 1, (tag, rc, out, err)
    return out


def kernels():
    """The whole corpus with PTXCACHE_RELOC_FULL=1, else every 16th kernel
    and one of three files."""
    ks = corpus(".ll")
    return ks if FULL else ks[::16] + [ks[40]]


def test_reloc_retarget_ptx_is_llc():
    """The PTX rewriter the oracle uses on Triton's own PTX writes what llc
    writes for the same IR at the new paths (comments aside): the byte
    lists, the unit length and the DIE offsets."""
    for k in ("002_", "061_", "007_"):
        ir = read([p for p in corpus(".ll") if os.path.basename(p).startswith(k)][0])
        files = DIFILE.findall(ir)
        a = [("/a" * (i + 1), "x%d.py" % i) for i in range(len(files))]
        for b in ([("/" + "q" * 300, "y" * 200 + ".py")] +
                  [("/lib%d" % i, "h.py") for i in range(1, len(files))],
                  [("/r", "z")] + [("/s" * 40 + "%d" % i, "k" * 9) for i in range(1, len(files))]):
            want = llc_ptx(ir, b)
            got = retarget_ptx(llc_ptx(ir, a), b)
            assert no_comments(got) == no_comments(want), k


def test_reloc_oracle_model_corpus():
    """cubin_debug.c and cubin_debug_elf.c alone against the real ptxas
    over the corpus (a subset; all with PTXCACHE_RELOC_FULL=1): for each kernel and each
    directory grouping, clients with paths of 2 to 850 bytes, stamps of
    every ULEB128 length and missing files, from llc's PTX and from
    Triton's own; the cubin laid out from the canonical entry is ptxas's,
    byte for byte, every time."""
    real = real_ptxas()
    rng = random.Random(19)
    counts = {}
    n_kernels = 0
    with tempfile.TemporaryDirectory() as t:
        for ki, ll in enumerate(kernels()):
            ir = read(ll)
            nfiles = len(DIFILE.findall(ir))
            triton = ll[:-3] + ".triton.ptx"
            text = read(triton)
            opts = OPTIONS[ki % len(OPTIONS)]
            fams = [("ir", False, lambda p: llc_ptx(ir, p))]
            if nfiles > 1:
                fams.append(("ir-shared", True, lambda p: llc_ptx(ir, p)))
            if len(file_paths(text)) == nfiles:
                fams.append(("triton", False, lambda p: retarget_ptx(text, p)))
            for tag, shared, fn in fams:
                out = oracle_family(real, t, "k%d%s" % (ki, tag), fn, nfiles, shared,
                                    6 if FULL else 5, opts, "sm_90a", rng)
                for line in out:
                    counts[line] = counts.get(line, 0) + 1
                assert out == ["identical"] * len(out), (ll, tag, opts, out)
            n_kernels += 1
    print("model oracle: %d kernels, %d layouts, all byte-identical to ptxas (%s)" %
          (n_kernels, sum(counts.values()), counts))


def test_reloc_oracle_model_other_targets():
    """The same on the other layouts ptxas writes: sm_80 (REL relocations,
    one segment over several sections), sm_100a and sm_120 (a second line
    table and sections that name another's bytes)."""
    real = real_ptxas()
    rng = random.Random(7)
    n = 0
    per_arch = {}
    with tempfile.TemporaryDirectory() as t:
        for arch in ("sm_80", "sm_100a", "sm_120"):
            for ki, ll in enumerate(corpus(".ll")[1::30]):
                ir = read(ll)
                nfiles = len(DIFILE.findall(ir))
                out = oracle_family(real, t, "%s-%d" % (arch, ki),
                                    lambda p: llc_ptx(ir, p, cpu=arch), nfiles, False, 4,
                                    OPTIONS[ki % len(OPTIONS)], arch, rng)
                if out is None:
                    continue    # llc does not take this kernel for this target
                assert out == ["identical"] * len(out), (arch, ll, out)
                n += len(out)
                per_arch[arch] = per_arch.get(arch, 0) + len(out)
    # No target may drop out unnoticed (llc 22 takes every kernel for each).
    assert n >= 12 and all(per_arch.get(a, 0) >= 3 for a in ("sm_80", "sm_100a", "sm_120")), \
        per_arch
    print("other targets: %d layouts, all byte-identical" % n)


def test_reloc_stamps_past_32_bits_stay_exact():
    """ptxas keeps 32 bits of a stamp: a file of 4 GiB or more, or an mtime
    past 2106, makes the request keyed on its bytes (not portable), and the
    daemon's answer is still the real ptxas's."""
    real = real_ptxas()
    ll = corpus(".ll")[1]
    ir = read(ll)
    name = DIFILE.search(ir).group(1).decode()
    with tempfile.TemporaryDirectory() as t, Daemon() as d:
        front = Front(t, d.socket)
        for mt, sz in ((2**33, 5), (5, 2**32 + 5)):
            src = os.path.join(t, "big", name)
            write_files([(os.path.dirname(src), name, mt, sz)])
            p = os.path.join(t, "k.ptx")
            with open(p, "wb") as f:
                f.write(llc_ptx(ir, [(os.path.dirname(src), name)]))
            with open(p + ".src", "w") as f:
                f.write(stamp_line(src))
            rc, out, _ = relocdrive("--shape", p, p + ".src")
            assert rc == 2, "stamps past 32 bits taken as portable"
            args = ["-lineinfo", "--gpu-name=sm_90a", p, "-o", p + ".o"]
            w = assemble(real, p, p + ".o", ["-lineinfo"])
            want = read(p + ".o")
            g = front.run(args)
            assert g.returncode == 0 and unvary(g.stderr) == unvary(w.stderr), g.stderr
            assert read(p + ".o") == want
            os.unlink(src)
        assert d.stats()["lineinfo_hits"] == 0


def users_ptx(text, t, user, i, mtime):
    """Triton's PTX of kernel k as user `user` would send it: its file in
    Inductor's default cache directory for that user (under t), written
    with the given mtime; library files (if any) as the user's venv has
    them, or missing."""
    paths = []
    files = []
    for j, p in enumerate(file_paths(text)):
        if j == 0:
            d = os.path.join(t, "tmp", "torchinductor_" + user, os.path.basename(os.path.dirname(p)))
            files.append((d, os.path.basename(p), mtime, 1000 + 37 * i))
        else:
            d = os.path.join(t, "home", user, "venv", "lib%d" % j)
            files.append((d, os.path.basename(p), 1700000000 + j, 20000 + j) if j == 1
                         else (d, os.path.basename(p), None, None))
        paths.append((files[-1][0], files[-1][1]))
    write_files(files)
    return retarget_ptx(text, paths), files


USERS = ["alice", "bob", "x", "mallory", "a" * 32, "u12345678901234567890", "eve"]


def run_users(real, d, t, front, ks, users, check=True):
    """Each user runs each kernel through the front; each answer must be
    the real ptxas's for that user's PTX and files (check: every answer;
    "first": each user's first kernel's; False: none). Returns the stats
    deltas of each user's pass."""
    passes = []
    for ui, user in enumerate(users):
        before = d.stats()
        for i, k in enumerate(ks):
            check_this = check is True or (check == "first" and i == 0)
            text, files = users_ptx(read(k), t, user, i, [1700000000, 0, 100][ui % 3])
            p = os.path.join(t, "%s-%d.ptx" % (user, i))
            with open(p, "wb") as f:
                f.write(text)
            args = ["-lineinfo", "-v", "--gpu-name=sm_90a", p, "-o", p + ".o"]
            if check_this:
                w = subprocess.run([real] + args, capture_output=True, timeout=600)
                assert w.returncode == 0, w.stderr
                want = read(p + ".o")
                os.unlink(p + ".o")
            g = front.run(args)
            assert g.returncode == 0, g.stderr
            if check_this:
                assert read(p + ".o") == want, "%s, %s: the front's cubin differs" % (user, k)
                assert unvary(g.stderr) == unvary(w.stderr), (g.stderr, w.stderr)
            os.unlink(p)
            os.unlink(p + ".o")
        after = d.stats()
        passes.append({key: after[key] - before[key] for key in
                       ("compiles", "hits", "lineinfo_hits", "lineinfo_layout_misses",
                        "lineinfo_unportable", "lineinfo_rewrite_errors")})
    return passes


def test_reloc_daemon_user_names_of_any_length():
    """Inductor's default cache directory is /tmp/torchinductor_$USER: users
    whose names differ in length (1 to 32 bytes), whose files differ in
    mtime (one of 0) and library files, each get the first user's compile
    as a hit, byte-identical to their own ptxas, and no layout miss."""
    real = real_ptxas()
    ks = [k for k in corpus(".triton.ptx")][3::20]
    with tempfile.TemporaryDirectory() as t, Daemon(workers=2) as d:
        front = Front(t, d.socket)
        passes = run_users(real, d, t, front, ks, USERS)
        assert passes[0]["compiles"] == len(ks), passes[0]
        for p in passes[1:]:
            assert p["compiles"] == 0 and p["lineinfo_hits"] == len(ks), passes
        s = d.stats()
        assert s["lineinfo_layout_misses"] == 0 and s["lineinfo_unportable"] == 0, s
        assert s["lineinfo_rewrite_errors"] == 0, s
        print("users: %d kernels x %d users, %d hits, all byte-identical" %
              (len(ks), len(USERS), s["lineinfo_hits"]))


def layout_misses_on_corpus(build=None, users=("alice", "bob", "x", "a" * 40), check=False):
    """The corpus (all of Triton's PTX) through a daemon of build (default
    this tree's) as each user in turn: the stats of each pass. For the
    report: run it against an older build to see what it missed."""
    real = real_ptxas()
    binary = os.path.join(build, "ptxcached") if build else harness.DAEMON
    with tempfile.TemporaryDirectory() as t, Daemon(workers=2, binary=binary) as d:
        front = Front(t, d.socket)
        return run_users(real, d, t, front, corpus(".triton.ptx"), list(users), check=check)


def test_reloc_corpus_layout_misses_none():
    """The figure issue 19 asks for: the corpus's kernels at four user-name
    lengths (5, 3, 1, 40 bytes): after the first user's pass, every request
    is a hit, no layout misses (every 4th kernel; all with
    PTXCACHE_RELOC_FULL=1, answers checked against ptxas there too)."""
    real = real_ptxas()
    ks = corpus(".triton.ptx") if FULL else corpus(".triton.ptx")[::4]
    users = ["alice", "bob", "x", "a" * 40]
    with tempfile.TemporaryDirectory() as t, Daemon(workers=2) as d:
        front = Front(t, d.socket)
        # Answers checked against ptxas: all with PTXCACHE_RELOC_FULL=1,
        # else the first kernel's at each user (cheap; the rest by counters).
        passes = run_users(real, d, t, front, ks, users, check=True if FULL else "first")
    for u, p in zip(users, passes):
        print("%-40s %s" % (u, p))
    for p in passes[1:]:
        assert p["compiles"] == 0 and p["lineinfo_layout_misses"] == 0, passes
        assert p["lineinfo_hits"] == len(ks), passes
        assert p["lineinfo_unportable"] == 0 and p["lineinfo_rewrite_errors"] == 0, passes
