# SPDX-License-Identifier: Apache-2.0
"""The service end to end: IR in, PTX out, through the real daemon, cached in
a real SQLite file; checked against the real llc of the same LLVM."""
import os
import signal
import subprocess
import tempfile
import threading
import time

from harness import (CLI, LLC, LLVM_BIN, SANITIZED, TRITON_FLAGS, Daemon, Raw, input_path,
                     Skip, frame, llc, mp_pack, mp_unpack, corpus_third, small_ir,
                     triton_kernels)

def test_ping_and_hello():
    with Daemon() as d:
        r = d.cli("ping")
        assert b"ptxcached" in r.stdout and b"LLVM 22" in r.stdout, r.stdout


def test_compile_matches_llc_then_hits():
    kernels = triton_kernels()[:3]
    with Daemon() as d:
        for k in kernels:
            want = llc(TRITON_FLAGS + [k, "-o", "-"]).stdout
            r = d.cli("compile", "--arch", "sm_90a", "--ptx-isa", "90", "-O3", k)
            assert r.stdout == want, "PTX of %s differs from llc's" % k
        s1 = d.stats()
        assert s1["compiles"] == len(kernels) and s1["misses"] == len(kernels), s1
        assert s1["entries"] == len(kernels) and s1["bytes"] > 0, s1
        for k in kernels:
            r = d.cli("compile", "--arch", "sm_90a", "--ptx-isa", "90", "-O3", "--json", k)
            assert b'"cached":true' in r.stdout, r.stdout
        s2 = d.stats()
        assert s2["hits"] == s1["hits"] + len(kernels) and s2["compiles"] == s1["compiles"], s2


def test_differential_triton_corpus_through_llc_front():
    """Corpus kernels through `ptxcache llc`, from a file and from
    stdin, is byte-identical to llc-22; a second pass is all hits (a third of
    the corpus; PTXCACHE_CORPUS_FULL=1: all)."""
    kernels = corpus_third(triton_kernels())
    with Daemon() as d:
        for k in kernels:
            want = llc(TRITON_FLAGS + [k, "-o", "-"])
            assert want.returncode == 0, k
            got = d.cli("llc", *TRITON_FLAGS, k, "-o", "-")
            assert got.stdout == want.stdout, "file %s differs" % k
            assert got.stderr == b"", got.stderr
            with open(k, "rb") as f:
                got2 = d.cli("llc", *TRITON_FLAGS, input=f.read())
            assert got2.stdout == want.stdout, "stdin %s differs" % k
        s1 = d.stats()
        distinct = len(set(open(k, "rb").read() for k in kernels))
        assert s1["compiles"] == distinct, (distinct, s1)
        for k in kernels:
            d.cli("llc", *TRITON_FLAGS, k, "-o", os.devnull)
        s2 = d.stats()
        assert s2["compiles"] == s1["compiles"], (s1, s2)
        assert s2["hits"] - s1["hits"] == len(kernels), (s1, s2)


def test_llc_default_output_name_and_bitcode():
    k = triton_kernels()[0]
    with Daemon() as d, tempfile.TemporaryDirectory() as t:
        bc = os.path.join(t, "k.bc")
        subprocess.run([os.path.join(LLVM_BIN, "llvm-as"), k, "-o", bc], check=True)
        d.cli("llc", "-mtriple=nvptx64-nvidia-cuda", "-mcpu=sm_90a", bc)
        want = llc(["-mtriple=nvptx64-nvidia-cuda", "-mcpu=sm_90a", bc, "-o", "-"]).stdout
        with open(os.path.join(t, "k.s"), "rb") as f:
            assert f.read() == want


def test_fatal_error_returns_llvm_reason_and_daemon_serves_on():
    """IR that makes LLVM abort: the front prints LLVM's reason and dies of
    SIGABRT like llc; the worker is replaced; the error is cached."""
    args = ["-mcpu=sm_70", input_path("cannot_select.ll")]
    with Daemon() as d:
        before = d.stats()
        r = d.cli("llc", *args, check=False)
        assert r.returncode == -signal.SIGABRT, r.returncode
        assert b"LLVM ERROR: Cannot select: intrinsic %llvm.nvvm.redux.sync.add" in r.stderr, r.stderr
        s = d.stats()
        assert s["worker_crashes"] == before["worker_crashes"] + 1, s
        assert s["compile_errors"] == before["compile_errors"] + 1, s
        # The next request is served.
        d.cli("compile", "-", input=small_ir("after_fatal"))
        # A repeat is answered from the negative entry, without a compile.
        r2 = d.cli("llc", *args, check=False)
        assert r2.returncode == -signal.SIGABRT and b"Cannot select" in r2.stderr
        s2 = d.stats()
        assert s2["compiles"] == s["compiles"] + 1 and s2["worker_crashes"] == s["worker_crashes"], s2


def test_parse_error_reported_like_llc():
    with Daemon() as d, tempfile.TemporaryDirectory() as t:
        r = d.cli("llc", "-mtriple=nvptx64", input=b"garbage\n", check=False)
        want = llc(["-mtriple=nvptx64"], input=b"garbage\n")
        assert r.returncode == want.returncode == 1
        assert r.stderr == want.stderr.replace(LLC.encode(), b"llc"), (r.stderr, want.stderr)
        bad = os.path.join(t, "bad.ll")
        with open(bad, "wb") as f:
            f.write(b"define void @f() {\n  ret i32\n}\n")
        r = d.cli("llc", "-mtriple=nvptx64", bad, "-o", "-", check=False)
        want = llc(["-mtriple=nvptx64", bad, "-o", "-"])
        assert r.returncode == 1 and r.stderr == want.stderr.replace(LLC.encode(), b"llc"), r.stderr


def test_compile_refuses_host_triple():
    ir = small_ir("host").replace(b"nvptx64-nvidia-cuda", b"x86_64-unknown-linux-gnu")
    with Daemon() as d:
        r = d.cli("compile", "-", input=ir, check=False)
        assert r.returncode != 0 and b"x86_64-unknown-linux-gnu" in r.stderr, r.stderr


def test_compile_refuses_unknown_cpu_and_option():
    with Daemon() as d:
        r = d.cli("compile", "--arch", "sm_999", "-", input=small_ir("cpu"), check=False)
        assert r.returncode != 0 and b"sm_999" in r.stderr, r.stderr
        r = d.cli("compile", "--option", "-no-such-llvm-option", "-", input=small_ir("opt"), check=False)
        assert r.returncode != 0 and b"no-such-llvm-option" in r.stderr, r.stderr
        d.cli("compile", "-", input=small_ir("after_bad"))


def test_backend_options_route_to_matching_workers():
    """A process-wide LLVM option changes the output exactly as in llc, and
    does not leak into jobs without it."""
    k = triton_kernels()[0]
    base = ["-mtriple=nvptx64-nvidia-cuda", "-mcpu=sm_90a", "-mattr=+ptx90"]
    with Daemon(workers=1) as d:
        for extra in (["-nvptx-fma-level=0"], [], ["-nvptx-fma-level=0", "-nvptx-short-ptr"], []):
            want = llc(base + extra + [k, "-o", "-"]).stdout
            got = d.cli("llc", *(base + extra), k, "-o", "-").stdout
            assert got == want, extra
        assert d.stats()["compiles"] == 3


def test_results_survive_restart():
    ir = small_ir("persist")
    with Daemon() as d:
        first = d.cli("compile", "-", input=ir).stdout
        d.stop(signal.SIGKILL)
        d.start()
        r = d.cli("compile", "--json", "-", input=ir)
        assert b'"cached":true' in r.stdout, r.stdout
        assert d.cli("compile", "-", input=ir).stdout == first
        assert d.stats()["compiles"] == 0


def test_second_daemon_on_same_cache_refused():
    with Daemon() as d:
        other = os.path.join(d.tmp, "other.sock")
        r = subprocess.run([d.args[0], "--socket", other, "--cache-dir", d.cache_dir],
                           capture_output=True, timeout=30)
        assert r.returncode != 0 and b"in use" in r.stderr, r.stderr
        d.cli("ping")


def test_worker_killed_mid_job_fails_only_that_job():
    with Daemon(workers=1) as d:
        (w,) = d.workers()
        os.kill(w, signal.SIGSTOP)
        out = {}
        t = threading.Thread(target=lambda: out.update(r=d.cli("compile", "--json", "-",
                                                               input=small_ir("killed"), check=False)))
        t.start()
        time.sleep(0.5)
        os.kill(w, signal.SIGKILL)
        t.join(60)
        r = out["r"]
        assert r.returncode != 0 and b'"status":"crash"' in r.stdout and b"signal 9" in r.stdout, r.stdout
        s = d.stats()
        assert s["worker_crashes"] == 1 and s["entries"] == 0, s
        # Not cached: the same request now compiles and succeeds.
        r = d.cli("compile", "--json", "-", input=small_ir("killed"))
        assert b'"status":"ok"' in r.stdout and b'"cached":false' in r.stdout


def _children(pid):
    """The processes whose parent is pid."""
    out = []
    for e in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open("/proc/%s/stat" % e) as f:
                st = f.read()
        except OSError:
            continue
        if int(st.rsplit(")", 1)[1].split()[1]) == pid:
            out.append(int(e))
    return out


def _alive(pid):
    """Running (not gone, not a zombie)."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _stand_in_ptxas(t, body):
    """A ptxas in directory t that answers --version as the real one (the
    daemon asks it at start) and otherwise runs body, a line of sh."""
    real = "/usr/local/cuda/bin/ptxas"
    if not os.access(real, os.X_OK):
        raise Skip("no ptxas at %s" % real)
    fake = os.path.join(t, "ptxas")
    with open(fake, "w") as f:
        f.write("#!/bin/sh\n"
                'case " $* " in *" --version "*) exec %s "$@";; esac\n'
                "%s\n" % (real, body))
    os.chmod(fake, 0o755)
    return fake


def test_a_ptxas_whose_worker_is_killed_goes_with_it():
    """An assembler that waits (not spending CPU, so RLIMIT_CPU never ends
    it) must not outlive the worker that started it: the worker killed
    mid-job (a crash, a job's deadline, a stop) takes its ptxas along."""
    with tempfile.TemporaryDirectory() as t:
        fake = _stand_in_ptxas(t, "exec sleep 600")
        with Daemon(workers=1, extra=["--ptxas", fake]) as d:
            out = {}
            t1 = threading.Thread(target=lambda: out.update(r=d.cli(
                "compile", "--cubin", "--json", "-", input=small_ir("orphan"), check=False)))
            t1.start()
            asm = None
            for _ in range(600):
                asm = next((w for w in _children(d.proc.pid)
                            if any(_alive(c) for c in _children(w))), None)
                if asm:
                    break
                time.sleep(0.05)
            assert asm, "no worker ever ran the assembler"
            (sleeper,) = [c for c in _children(asm) if _alive(c)]
            os.kill(asm, signal.SIGKILL)
            t1.join(60)
            assert b'"status":"crash"' in out["r"].stdout, out["r"].stdout
            for _ in range(200):
                if not _alive(sleeper):
                    break
                time.sleep(0.05)
            else:
                os.kill(sleeper, signal.SIGKILL)
                raise AssertionError("the assembler outlived its worker")
            d.cli("ping")


def test_a_ptxas_that_writes_past_what_is_read_back_is_stopped():
    """Each file the assembler writes (its cubin, its log) is bounded by
    what the worker reads back (RLIMIT_FSIZE): one that grows its log past
    that is refused the write, and fails with a clear error before it can
    fill the disk under the workers' directory."""
    with tempfile.TemporaryDirectory() as t:
        fake = _stand_in_ptxas(t, "exec truncate -s 300M /dev/stderr")
        with Daemon(workers=1, extra=["--ptxas", fake]) as d:
            r = d.cli("compile", "--cubin", "--json", "-", input=small_ir("biglog"), check=False)
            assert r.returncode != 0, r.stdout
            # EFBIG where the master ignores SIGXFSZ (ignored stays ignored
            # across an exec), the signal where it does not.
            assert (b"File too large" in r.stdout
                    or b"signal %d" % signal.SIGXFSZ in r.stdout), r.stdout
            d.cli("ping")


def test_job_timeout_kills_worker_and_daemon_serves_on():
    with Daemon(workers=1, extra=["--job-timeout", "1"]) as d:
        (w,) = d.workers()
        os.kill(w, signal.SIGSTOP)
        r = d.cli("compile", "--json", "-", input=small_ir("timeout"), check=False)
        assert r.returncode != 0 and b'"status":"timeout"' in r.stdout, r.stdout
        assert d.stats()["worker_timeouts"] == 1
        r = d.cli("compile", "--json", "-", input=small_ir("timeout"))
        assert b'"status":"ok"' in r.stdout


def test_client_timeout_never_hangs():
    with Daemon(workers=1) as d:
        (w,) = d.workers()
        os.kill(w, signal.SIGSTOP)
        t0 = time.time()
        r = d.cli("--timeout", "0.5", "compile", "-", input=small_ir("ctimeout"), check=False)
        assert r.returncode != 0 and b"timed out" in r.stderr, r.stderr
        assert time.time() - t0 < 30
        os.kill(w, signal.SIGCONT)


def test_no_daemon_clear_error():
    with tempfile.TemporaryDirectory() as t:
        r = subprocess.run([CLI, "--socket", os.path.join(t, "none.sock"), "ping"],
                           capture_output=True, timeout=30)
        assert r.returncode != 0 and b"cannot connect" in r.stderr, r.stderr
        assert len(r.stderr.strip().splitlines()) == 1


def test_default_socket_and_cache_locations():
    with tempfile.TemporaryDirectory() as t:
        env = dict(os.environ, XDG_RUNTIME_DIR=os.path.join(t, "run"),
                   XDG_CACHE_HOME=os.path.join(t, "cache"))
        env.pop("PTXCACHE_SOCKET", None)
        os.makedirs(env["XDG_RUNTIME_DIR"], mode=0o700)
        p = subprocess.Popen([os.path.join(os.path.dirname(CLI), "ptxcached"), "--workers", "1"],
                             env=env, stderr=subprocess.DEVNULL)
        try:
            sock = os.path.join(t, "run", "ptxcache", "ptxcached.sock")
            for _ in range(600):
                if subprocess.run([CLI, "ping"], env=env, capture_output=True).returncode == 0:
                    break
                time.sleep(0.05)
            else:
                raise AssertionError("daemon on defaults did not answer")
            assert os.stat(sock).st_mode & 0o777 == 0o600
            assert os.stat(os.path.dirname(sock)).st_mode & 0o777 == 0o700
            assert os.path.exists(os.path.join(t, "cache", "ptxcache", "cache.db"))
        finally:
            p.kill()
            p.wait()


def test_malformed_frames_get_errors_and_daemon_serves_on():
    with Daemon() as d:
        cases = [
            b"GET / HTTP/1.0\r\n\r\n",                                  # bad magic
            frame(3, b"", version=9),                                   # bad version
            b"PX\x01\x03\xff\xff\xff\xff",                              # absurd length
            frame(3, b"\xdd\xff\xff\xff\xff"),                          # array bomb
            frame(3, mp_pack({"id": 1}) + b"x"),                        # trailing bytes
            frame(3, b"\x81" * 200 + b"\x00"),                          # deep nesting
        ]
        for data in cases:
            c = Raw(d.socket)
            c.send(data)
            f = c.recv_frame()
            assert f is not None and f[0] == 0xFF, (data[:16], f)
            assert c.closed(), data[:16]
            c.close()
        # Well-formed frame, bad request: an error frame, connection kept.
        c = Raw(d.socket)
        c.send(frame(3, mp_pack({"id": 7, "input": b"x", "opt": 9})))
        t, body = c.recv_frame()
        assert t == 0xFF and b"optimisation level" in body, body
        c.send(frame(2, mp_pack({"id": 8})))
        t, body = c.recv_frame()
        assert t == 0x82, t
        c.close()
        # Vanished client mid-frame.
        c = Raw(d.socket)
        c.send(frame(3, mp_pack({"id": 1, "input": b"x" * 1000}))[:500])
        c.close()
        assert d.stats()["protocol_errors"] == len(cases)
        d.cli("compile", "-", input=small_ir("after_garbage"))


def test_pipelined_requests_answered_by_id():
    """Several requests on one connection, answered by id."""
    with Daemon() as d:
        c = Raw(d.socket, timeout=120)
        reqs = [frame(3, mp_pack({"id": 100 + i, "input": small_ir("pipe%d" % i), "strict": True}))
                for i in range(4)]
        c.send(b"".join(reqs) + frame(2, mp_pack({"id": 50})))
        ids = set()
        for _ in range(5):
            t, body = c.recv_frame()
            assert t in (0x83, 0x82), t
            for i in list(range(100, 104)) + [50]:
                if b"\xa2id" + bytes([i]) in body:
                    ids.add(i)
        assert ids == set(range(100, 104)) | {50}, ids
        c.close()


def test_frames_in_any_pieces_are_read_whole():
    """The master reads frames itself (conn.c): a request cut anywhere,
    in its header or its body, below and beyond the sizes its reads work in
    (64 KB first, 256 KB ahead, 256 KB kept), or sent together with the
    next, is the same request: each reply is the one a whole request on a
    connection of its own got."""
    big = max((k for k in triton_kernels() if os.path.getsize(k) < (2 << 20)),
              key=os.path.getsize)
    assert os.path.getsize(big) > 600 << 10, big
    inputs = [small_ir("pieces"), open(big, "rb").read()]

    def req(i, n):
        return frame(3, mp_pack({"id": i, "input": inputs[n], "cpu": "sm_90a", "strict": True}))

    def output(c, i):
        t, body = c.recv_frame()
        m = mp_unpack(body)
        assert t == 0x83 and m["id"] == i and m["status"] == 0, (t, m)
        return m["output"]

    with Daemon(workers=1) as d:
        want = []
        for n in range(2):
            c = Raw(d.socket, timeout=120)
            c.send(req(1, n))
            want.append(output(c, 1))
            c.close()
        assert want[0] != want[1]
        c = Raw(d.socket, timeout=120)
        small, large = req(2, 0), req(3, 1)
        cuts = [(small, [1, 2, 7, 8, 9]), (large, [5, 8, 4096, 65536, 65537, 300000, 600000])]
        for i, (f, at) in enumerate(cuts):
            edges = [0] + at + [len(f)]
            for a, b in zip(edges, edges[1:]):
                c.send(f[a:b])
                time.sleep(0.01)
            assert output(c, 2 + i) == want[i]
        # Two frames in one send with the start of a third: cut inside its
        # length, then inside its body.
        third = req(6, 0)
        c.send(req(4, 1) + req(5, 0) + third[:6])
        assert output(c, 4) == want[1] and output(c, 5) == want[0]
        c.send(third[6:100])
        time.sleep(0.01)
        c.send(third[100:] + req(7, 1)[:1000])
        assert output(c, 6) == want[0]
        c.send(req(7, 1)[1000:])
        assert output(c, 7) == want[1]
        c.close()
        s = d.stats()
        assert s["protocol_errors"] == 0, s


def vm_peak(pid):
    """A process's largest address space so far, in bytes."""
    with open("/proc/%d/status" % pid) as f:
        kb = [line.split()[1] for line in f if line.startswith("VmPeak:")]
    return int(kb[0]) * 1024


def test_worker_memory_cap_fails_only_that_job_and_is_not_cached():
    """A compile that needs more memory than --worker-mem: the worker dies,
    the client gets an error, nothing is cached (it is the environment, not
    the kernel), and a small kernel is still served. The cap lies halfway
    between a warm worker's address space and what the largest corpus
    kernel's compile takes it to, both measured first: a build that maps
    more or less (the static one maps no shared library) moves both."""
    if SANITIZED:
        raise Skip("no worker memory cap under AddressSanitizer")
    big = max(triton_kernels(), key=os.path.getsize)
    with Daemon(workers=1) as d:
        (w,) = d.workers()
        warm = vm_peak(w)
        d.cli("compile", big)
        (again,) = d.workers()
        assert again == w, "the worker was replaced during the measuring compile"
        peak = vm_peak(w)
    assert peak - warm > 16 << 20, ("the largest kernel takes a worker from %d to %d bytes: "
                                    "too close for a cap between them" % (warm, peak))
    cap = (warm + peak) // 2
    print("     worker %.0f MB warm, %.0f MB at the largest kernel's peak: --worker-mem %.0f MB"
          % (warm / 2**20, peak / 2**20, cap / 2**20))
    with Daemon(workers=1, extra=["--worker-mem", "%dK" % (cap >> 10)]) as d:
        r = d.cli("compile", "--json", big, check=False)
        assert r.returncode != 0 and b'"status":"crash"' in r.stdout, r.stdout[:300]
        s = d.stats()
        assert s["worker_crashes"] == 1 and s["entries"] == 0, s
        d.cli("compile", "-", input=small_ir("after_oom"))
        assert d.stats()["entries"] == 1


def test_workers_recycled_after_n_jobs():
    with Daemon(workers=1, extra=["--recycle-after", "2"]) as d:
        first = d.workers()
        for i in range(5):
            d.cli("compile", "-", input=small_ir("recycle%d" % i))
        s = d.stats()
        assert s["workers_recycled"] == 2 and s["worker_crashes"] == 0, s
        assert d.workers() != first


def test_workers_dying_in_a_loop_back_off():
    """A worker that cannot even start (its memory cap is below what LLVM
    needs) dies again and again: the daemon keeps serving what needs no
    worker, and spawns with growing pauses instead of in a tight loop."""
    if SANITIZED:
        raise Skip("no worker memory cap under AddressSanitizer")
    with Daemon(workers=1, extra=["--worker-mem", "16M"]) as d:
        time.sleep(3)
        s = d.stats()
        assert s["workers_ready"] == 0 and 2 <= s["workers_spawned"] <= 15, s
        d.cli("ping")
