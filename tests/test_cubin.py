# SPDX-License-Identifier: Apache-2.0
"""The PTX to cubin stage and the drop-in ptxas front, end to end: the real
daemon, the real ptxas (CUDA 13 where present), real files.

The byte-identity tests need a real ptxas and are skipped without one; the
no-CUDA and fallback tests run everywhere."""
import concurrent.futures
import os
import re
import shutil
import signal
import subprocess
import tempfile
import threading

from harness import (CLI, TRITON_FLAGS, Daemon, Raw, Skip, corpus, frame,
                     llc, mp_pack, corpus_third, triton_kernels)

CUDA_GUESS = [os.environ.get("PTXCACHE_PTXAS", ""),
              os.path.join(os.environ.get("CUDA_HOME", "/nonexistent"), "bin", "ptxas"),
              "/usr/local/cuda/bin/ptxas"]
BAD_PTX = (b".version 8.7\n.target sm_90a\n.address_size 64\n"
           b".visible .entry k() { bogus; }\n")


def real_ptxas():
    for p in CUDA_GUESS + [os.path.join(d, "ptxas") for d in os.environ.get("PATH", "").split(":") if d]:
        if p and os.path.isfile(p) and os.access(p, os.X_OK):
            return p
    raise Skip("no ptxas here (CUDA not installed)")


def triton_ptx():
    return corpus(".triton.ptx")


class Front:
    """build/ptxcache behind a symlink named ptxas, as TRITON_PTXAS_PATH sees it."""

    def __init__(self, tmp, socket):
        self.path = os.path.join(tmp, "bin", "ptxas")
        os.makedirs(os.path.dirname(self.path), exist_ok=True)
        if not os.path.islink(self.path):
            os.symlink(CLI, self.path)
        self.env = dict(os.environ, PTXCACHE_SOCKET=socket)

    def run(self, args, cwd=None, env=None):
        e = dict(self.env, **(env or {}))
        return subprocess.run([self.path] + list(args), capture_output=True, cwd=cwd,
                              env=e, timeout=300)


def unvary(log):
    """ptxas prints how long it took; nothing else in its log varies."""
    return re.sub(rb"Compile time = [0-9.]+ ms", b"Compile time = X ms", log)


def read(path):
    with open(path, "rb") as f:
        return f.read()


def triton_call(ptxas, env, src, tmp, extra=()):
    """ptxas as Triton 3.x runs it: a temporary .ptx, its name + .o out."""
    fd, name = tempfile.mkstemp(suffix=".ptx", dir=tmp)
    with os.fdopen(fd, "wb") as f:
        f.write(read(src))
    out = name + ".o"
    r = subprocess.run([ptxas, "-lineinfo", *extra, "-v", "--gpu-name=sm_90a", name, "-o", out],
                       capture_output=True, env=env, timeout=300)
    cubin = read(out) if os.path.exists(out) else None
    for p in (name, out):
        if os.path.exists(p):
            os.unlink(p)
    return r.returncode, cubin, r.stderr.replace(name.encode(), b"IN")


def test_cubin_triton_corpus_byte_identical_then_hits():
    """Triton PTX files of the corpus, called the way Triton calls
    ptxas: the front's cubin and log are the real ptxas's, byte for byte;
    a repeat is a hit for every kernel, with no assembler run (a third of
    the corpus; PTXCACHE_CORPUS_FULL=1: all)."""
    real = real_ptxas()
    kernels = corpus_third(triton_ptx())
    with Daemon(workers=2) as d, tempfile.TemporaryDirectory() as t:
        front = Front(t, d.socket)

        def one(k):
            want = triton_call(real, os.environ, k, t)
            got = triton_call(front.path, front.env, k, t)
            return k, want, got

        with concurrent.futures.ThreadPoolExecutor(2) as ex:
            for k, want, got in ex.map(one, kernels):
                assert want[0] == 0 and want[1], (k, want[2])
                assert got[0] == want[0], (k, got[0], got[2])
                assert got[1] == want[1], "cubin of %s differs from ptxas's" % k
                assert unvary(got[2]) == unvary(want[2]), (k, got[2], want[2])
        s1 = d.stats()
        distinct = len(set(read(k) for k in kernels))
        assert s1["compiles"] == distinct and s1["compile_errors"] == 0, (distinct, s1)
        for k in kernels:
            rc, cubin, _ = triton_call(front.path, front.env, k, t)
            assert rc == 0 and cubin
        s2 = d.stats()
        assert s2["compiles"] == s1["compiles"], (s1, s2)
        assert s2["hits"] - s1["hits"] == len(kernels), (s1, s2)


def test_ptxas_argument_forms_of_triton_cudajl_and_clang():
    """The forms real clients use give the real ptxas's bytes: Triton's
    --fmad=false and --opt-level 0, CUDA.jl's long options, clang's -m64 -O3
    ... -c; options in another order or spelling hit the same entry."""
    real = real_ptxas()
    k = triton_ptx()[3]
    forms = [
        ["-lineinfo", "--fmad=false", "-v", "--opt-level", "0", "--gpu-name=sm_90a", "IN", "-o", "OUT"],
        ["--generate-line-info", "--verbose", "--gpu-name", "sm_90a", "--output-file", "OUT", "IN"],
        ["-m64", "-O3", "-lineinfo", "-v", "--gpu-name", "sm_90a", "--output-file", "OUT", "IN", "-c"],
        ["-lineinfo", "-suppress-debug-info", "-v", "--gpu-name=sm_90a", "IN", "-o", "OUT"],
    ]
    with Daemon() as d, tempfile.TemporaryDirectory() as t:
        front = Front(t, d.socket)
        src = os.path.join(t, "k.ptx")
        shutil.copy(k, src)
        for args in forms:
            outs = []
            for exe, env in ((real, os.environ), (front.path, front.env)):
                out = os.path.join(t, "out.cubin")
                a = [src if x == "IN" else out if x == "OUT" else x for x in args]
                r = subprocess.run([exe] + a, capture_output=True, env=env, timeout=300)
                assert r.returncode == 0, (args, r.stderr)
                outs.append((read(out), unvary(r.stderr)))
                os.unlink(out)
            assert outs[0] == outs[1], "%s: the front differs from ptxas" % args
        n = d.stats()["compiles"]
        # Same options, other spelling and order: the same key.
        out = os.path.join(t, "x.cubin")
        r = front.run(["--gpu-name=sm_90a", "-v", "--generate-line-info", "--opt-level=0",
                       "-fmad=false", src, "-o", out])
        assert r.returncode == 0, r.stderr
        s = d.stats()
        assert s["compiles"] == n, s


def test_ptxas_error_replayed_with_exit_code_and_cached():
    """A syntax error: the same message (naming the client's file), the same
    exit status as ptxas, no output file; the repeat comes from the
    negative entry."""
    real = real_ptxas()
    with Daemon() as d, tempfile.TemporaryDirectory() as t:
        front = Front(t, d.socket)
        bad = os.path.join(t, "bad.ptx")
        with open(bad, "wb") as f:
            f.write(BAD_PTX)
        want = subprocess.run([real, "--gpu-name=sm_90a", bad, "-o", os.path.join(t, "w.o")],
                              capture_output=True)
        assert want.returncode == 255 and b"bad.ptx, line 4" in want.stderr, want.stderr
        for i in range(2):
            got = front.run(["--gpu-name=sm_90a", bad, "-o", os.path.join(t, "g.o")])
            assert got.returncode == want.returncode, got
            assert got.stderr == want.stderr, (got.stderr, want.stderr)
            assert not os.path.exists(os.path.join(t, "g.o"))
        s = d.stats()
        assert s["compiles"] == 1 and s["compile_errors"] == 1 and s["hits"] == 1, s


def test_ptxas_version_is_the_real_text():
    real = real_ptxas()
    want = subprocess.run([real, "--version"], capture_output=True)
    with Daemon() as d, tempfile.TemporaryDirectory() as t:
        front = Front(t, d.socket)
        got = front.run(["--version"])
        assert got.returncode == 0 and got.stdout == want.stdout, got.stdout
        assert re.search(rb"release (\d+\.\d+)", got.stdout)
        # Also as a command of the CLI.
        r = d.cli("ptxas", "--version")
        assert r.stdout == want.stdout


def test_ptxas_front_falls_back_to_real_ptxas_when_daemon_is_down():
    """No daemon (never started, then killed): the front runs the real
    ptxas itself, with the same bytes, log and exit status."""
    real = real_ptxas()
    k = triton_ptx()[0]
    with tempfile.TemporaryDirectory() as t:
        front = Front(t, os.path.join(t, "no-daemon.sock"))
        want = triton_call(real, os.environ, k, t)
        got = triton_call(front.path, dict(front.env, PTXCACHE_PTXAS=real), k, t)
        assert got[0] == want[0] == 0 and got[1] == want[1], got[2]
        assert unvary(got[2]) == unvary(want[2])
        v = front.run(["--version"], env={"PTXCACHE_PTXAS": real})
        assert v.stdout == subprocess.run([real, "--version"], capture_output=True).stdout
        bad = os.path.join(t, "bad.ptx")
        with open(bad, "wb") as f:
            f.write(BAD_PTX)
        r = front.run(["--gpu-name=sm_90a", bad, "-o", os.path.join(t, "g.o")])
        assert r.returncode == 255 and b"bad.ptx, line 4" in r.stderr, r.stderr
    with Daemon() as d, tempfile.TemporaryDirectory() as t:
        front = Front(t, d.socket)
        d.stop(signal.SIGKILL)
        got = triton_call(front.path, front.env, k, t)
        assert got[0] == 0 and got[1] == want[1], got[2]


def test_ptxas_front_passes_unknown_options_to_real_ptxas_uncached():
    """-g puts the input path into the cubin, and an option we do not know
    is not ours to guess at: both run the real ptxas, and the daemon is not
    asked."""
    real = real_ptxas()
    k = triton_ptx()[1]
    with Daemon() as d, tempfile.TemporaryDirectory() as t:
        front = Front(t, d.socket)
        src = os.path.join(t, "k.ptx")
        shutil.copy(k, src)
        before = d.stats()
        for args in (["-g", "--gpu-name=sm_90a"], ["--gpu-name=sm_90a", "--sanitize", "memcheck"],
                     ["--gpu-name=sm_90a", "--no-such-option"]):
            # (-g also embeds the output's name: the same one for both.)
            out = os.path.join(t, "k.o")
            w = subprocess.run([real] + args + [src, "-o", out], capture_output=True)
            want = read(out) if w.returncode == 0 else None
            g = front.run(args + [src, "-o", out])
            assert g.returncode == w.returncode, (args, g.stderr, w.stderr)
            assert g.stderr == w.stderr, (args, g.stderr)
            if w.returncode == 0:
                assert read(out) == want, args
        after = d.stats()
        assert after["misses"] == before["misses"] and after["hits"] == before["hits"], after


def hide_cuda_env():
    """An environment with no CUDA: no ptxas on PATH, CUDA_HOME unset, and
    the /usr/local/cuda fallback switched off."""
    env = {"CUDA_HOME": "", "PTXCACHE_PTXAS": "", "PTXCACHE_NVJITLINK": "", "PATH": "/usr/bin:/bin"}
    env["PTXCACHE_DEFAULT_CUDA"] = ""
    for d in env["PATH"].split(":"):
        if os.path.exists(os.path.join(d, "ptxas")):
            raise Skip("a ptxas in %s cannot be hidden" % d)
    return env


def test_cubin_without_cuda_serves_ptx_and_refuses_cubin_clearly():
    ll = triton_kernels()[0]
    with Daemon(env=hide_cuda_env()) as d:
        assert "no ptxas found" in d.logtext() and "cubin requests will be refused" in d.logtext()
        r = d.cli("compile", "--arch", "sm_90a", "--ptx-isa", "90", ll)
        assert r.stdout.startswith(b"//"), r.stdout[:40]
        r = d.cli("compile", "--cubin", "--arch", "sm_90a", "--ptx-isa", "90", "--json", ll, check=False)
        assert r.returncode != 0 and b'"status":"unavailable"' in r.stdout, r.stdout
        assert b"no ptxas found" in r.stdout and b"PTXCACHE_PTXAS" in r.stdout, r.stdout
        # The front, which can see a ptxas of its own, still builds.
        try:
            real = real_ptxas()
        except Skip:
            return
        with tempfile.TemporaryDirectory() as t:
            front = Front(t, d.socket)
            k = triton_ptx()[0]
            got = triton_call(front.path, front.env, k, t)
            want = triton_call(real, os.environ, k, t)
            assert got[0] == 0 and got[1] == want[1]


def test_compile_cubin_on_ir_caches_both_stages():
    """IR to cubin: the PTX stage is cached (a later PTX request hits), the
    cubin is what ptxas makes of llc's PTX, and a repeat hits."""
    real = real_ptxas()
    ll = triton_kernels()[2]
    with Daemon() as d, tempfile.TemporaryDirectory() as t:
        out = os.path.join(t, "k.cubin")
        r = d.cli("compile", "--cubin", "--arch", "sm_90a", "--ptx-isa", "90", "-O3", "--json",
                  "-o", out, ll)
        assert b'"status":"ok"' in r.stdout and b'"cached":false' in r.stdout, r.stdout
        s1 = d.stats()
        assert s1["compiles"] == 2 and s1["misses"] == 2, s1
        ptx = os.path.join(t, "k.ptx")
        with open(ptx, "wb") as f:
            f.write(llc(TRITON_FLAGS + [ll, "-o", "-"]).stdout)
        subprocess.run([real, "--gpu-name=sm_90a", ptx, "-o", os.path.join(t, "want.cubin")],
                       check=True, capture_output=True)
        assert read(out) == read(os.path.join(t, "want.cubin"))
        r = d.cli("compile", "--cubin", "--arch", "sm_90a", "--ptx-isa", "90", "-O3", "--json",
                  "-o", out, ll)
        assert b'"cached":true' in r.stdout, r.stdout
        d.cli("compile", "--arch", "sm_90a", "--ptx-isa", "90", "-O3", ll)
        s2 = d.stats()
        assert s2["compiles"] == 2 and s2["hits"] == s1["hits"] + 3, s2
        # A PTX file goes through the second stage alone, to the same entry.
        r = d.cli("compile", "--cubin", "--arch", "sm_90a", "--json", "-o", out, ptx)
        assert b'"cached":true' in r.stdout, r.stdout


def test_cubin_single_flight():
    """Eight clients assemble the same PTX at once: one ptxas run."""
    real_ptxas()
    k = max(triton_ptx(), key=os.path.getsize)
    with Daemon(workers=2) as d, tempfile.TemporaryDirectory() as t:
        front = Front(t, d.socket)
        results = []

        def go():
            results.append(triton_call(front.path, front.env, k, t))
        th = [threading.Thread(target=go) for _ in range(8)]
        for x in th:
            x.start()
        for x in th:
            x.join()
        assert len(results) == 8 and all(r[0] == 0 and r[1] == results[0][1] for r in results)
        s = d.stats()
        assert s["compiles"] == 1 and s["hits"] + s["dedup_joins"] == 7, s


def test_cubin_nvjitlink_backend_in_process():
    """nvJitLink, where the daemon finds it: a cubin (an ELF) from the
    worker itself, cached under its own key, apart from ptxas's."""
    real_ptxas()
    k = triton_ptx()[0]
    with Daemon() as d, tempfile.TemporaryDirectory() as t:
        if "nvJitLink '" not in d.logtext() and not os.path.exists("/usr/local/cuda/lib64/libnvJitLink.so.13"):
            raise Skip("no nvJitLink")
        out = os.path.join(t, "n.cubin")
        r = d.cli("compile", "--cubin", "--backend", "nvjitlink", "--arch", "sm_90a", "--json",
                  "-o", out, k, check=False)
        if b"unavailable" in r.stdout:
            raise Skip("no nvJitLink: %s" % r.stdout)
        assert b'"status":"ok"' in r.stdout, r.stdout
        assert read(out)[:4] == b"\x7fELF"
        r = d.cli("compile", "--cubin", "--backend", "nvjitlink", "--arch", "sm_90a", "--json",
                  "-o", out, k)
        assert b'"cached":true' in r.stdout
        r = d.cli("compile", "--cubin", "--arch", "sm_90a", "--json", "-o", out, k)
        assert b'"cached":false' in r.stdout, r.stdout


def test_cubin_request_refuses_options_that_name_files():
    """The daemon runs no option it does not know: an options file or an
    output path in asm_args is an invalid request, not a ptxas run."""
    with Daemon() as d:
        raw = Raw(d.socket)
        for args in (["--gpu-name=sm_90a", "--options-file=/etc/passwd"],
                     ["--output-file=/tmp/x"], ["-o", "/tmp/x"], ["--gpu-name=compute_90"]):
            raw.send(frame(3, mp_pack({"id": 5, "kind": "cubin", "input_kind": "ptx",
                                       "input": BAD_PTX, "asm_args": args})))
            t, body = raw.recv_frame()
            assert t == 0xff and b"invalid" in body, (args, t, body)
        assert d.stats()["compiles"] == 0


def test_ptxas_source_file_stamps_are_part_of_the_key():
    """With -lineinfo ptxas copies the mtime and size of the files the
    PTX's .file directives name into the cubin: a touched source never gets
    a stale cubin. Absent, present and touched are one compile and hits
    with each one's own stamps laid out (daemon/cubin_debug.c), whatever
    their ULEB128 lengths; an unchanged one a hit."""
    real = real_ptxas()
    k = triton_ptx()[0]
    with Daemon() as d, tempfile.TemporaryDirectory() as t:
        front = Front(t, d.socket)
        src = os.path.join(t, "kernel_src.py")
        ptx = os.path.join(t, "k.ptx")
        with open(ptx, "wb") as f:
            f.write(re.sub(rb'\.file\t1 "[^"]*"', b'.file\t1 "' + src.encode() + b'"', read(k)))
        out = os.path.join(t, "k.o")
        seen = []
        for step in ("absent", "present", "touched", "again"):
            if step == "present":
                with open(src, "w") as f:
                    f.write("x = 1\n")
            elif step == "touched":
                os.utime(src, (1577836800, 1577836800))
            subprocess.run([real, "-lineinfo", "--gpu-name=sm_90a", ptx, "-o", out], check=True)
            want = read(out)
            r = front.run(["-lineinfo", "--gpu-name=sm_90a", ptx, "-o", out])
            assert r.returncode == 0 and read(out) == want, (step, r.stderr)
            seen.append(want)
        assert seen[0] != seen[1] != seen[2] and seen[2] == seen[3]
        s = d.stats()
        assert s["compiles"] == 1 and s["hits"] == 3 and s["lineinfo_hits"] == 3, s
