# SPDX-License-Identifier: Apache-2.0
"""The llc front answers every llc command line as llc does (same stdout,
same output file bytes, same exit status or signal), in bounded time, and
nothing a client sends makes the daemon start workers in a loop.

Each run compares `ptxcache llc ARGS` with LLVM 22's `llc ARGS`, each in a
fresh directory of its own, on inputs the project wrote (tests/inputs/ and
harness.small_ir)."""
import os
import random
import re
import shutil
import signal
import subprocess
import tempfile
import time

from harness import (CLI, LLC, ROOT, SANITIZED, Daemon, Raw, Skip, frame, input_path, mp_pack,
                     mp_unpack, corpus_third, small_ir)

# Every invocation must be answered within this (no hangs); far above any
# of these compiles, far below the client's own 300 s.
BOUND_S = 60


def normalise_stderr(text):
    """stderr with the program named "llc", without what only a crash
    prints (LLVM's bug-report banner and stack dump), and with addresses
    (SelectionDAG nodes in "Cannot select" dumps differ from run to run of
    llc itself) as 0x..."""
    text = text.replace(LLC.encode(), b"llc")
    cut = text.find(b"PLEASE submit a bug report")
    text = text if cut < 0 else text[:cut]
    return re.sub(rb"0x[0-9a-f]{6,}", b"0x...", text)


class Run:
    def __init__(self, rc, stdout, stderr, files):
        self.rc, self.stdout, self.stderr, self.files = rc, stdout, stderr, files

    def __repr__(self):
        return "rc=%s stdout=%d bytes files=%s stderr=%r" % (
            self.rc, len(self.stdout), sorted(self.files), self.stderr[:400])


def run_in(cmd, args, inputs, stdin=None, env=None):
    """cmd + args in a fresh directory holding copies of inputs; the exit
    status (negative: the signal), stdout, stderr and every file left."""
    with tempfile.TemporaryDirectory() as t:
        for name in inputs:
            shutil.copy(input_path(name) if os.path.exists(input_path(name)) else name, t)
        try:
            r = subprocess.run(cmd + args, input=stdin, capture_output=True, cwd=t,
                               timeout=BOUND_S, env=env)
        except subprocess.TimeoutExpired:
            return Run("timeout", b"", b"", {})
        files = {}
        for f in os.listdir(t):
            if f not in [os.path.basename(i) for i in inputs]:
                with open(os.path.join(t, f), "rb") as fh:
                    files[f] = fh.read()
        return Run(r.returncode, r.stdout, r.stderr, files)


def front_env(d):
    return dict(os.environ, PTXCACHE_SOCKET=d.socket)


def both(d, args, inputs=(), stdin=None):
    want = run_in([LLC], args, list(inputs), stdin)
    got = run_in([CLI, "llc"], args, list(inputs), stdin, env=front_env(d))
    return want, got


def same(want, got, stderr=True):
    """The same exit, stdout, files and output bytes. Other files llc
    writes (--time-trace's out.s.time-trace) hold timings: their names must
    match, not their bytes."""
    def outputs(r):
        return {n: (b if n == "out.s" or not n.startswith("out.s.") else None)
                for n, b in r.files.items()}
    return (want.rc == got.rc and want.stdout == got.stdout and
            outputs(want) == outputs(got) and
            (not stderr or normalise_stderr(want.stderr) == normalise_stderr(got.stderr)))


def write_inputs(t):
    """The valid kernel, as a file, for tests that need one."""
    p = os.path.join(t, "vadd.ll")
    with open(p, "wb") as f:
        f.write(small_ir("vadd"))
    return p


def test_stop_after_runs_real_llc_and_starts_no_worker():
    """Case 1: -stop-after prints MIR, as llc does, at once; no worker is
    ever started with it. A raw request with it is refused, not queued."""
    with Daemon(workers=1) as d, tempfile.TemporaryDirectory() as t:
        vadd = write_inputs(t)
        before = d.stats()
        want, got = both(d, ["-mtriple=nvptx64", "-stop-after=finalize-isel", vadd, "-o", "-"])
        assert want.rc == 0 and b"name:" in want.stdout and same(want, got), (want, got)
        raw = Raw(d.socket)
        raw.send(frame(3, mp_pack({"id": 1, "input": small_ir("stop"),
                                   "options": ["-stop-after=finalize-isel"]})))
        t_, body = raw.recv_frame()
        reply = mp_unpack(body)
        assert t_ == 0xff and reply["code"] == "invalid" and b"stop-after" in \
            reply["message"].encode(), reply
        time.sleep(0.5)
        s = d.stats()
        assert s["workers_spawned"] == before["workers_spawned"], s
        assert s["jobs_queued"] == 0 and s["compiles"] == before["compiles"], s


def test_version_help_and_cpu_list_are_llcs_own():
    """Cases 2 and 4: --version, --help and -mcpu=help print what llc
    prints, on the same streams."""
    with Daemon(workers=1) as d, tempfile.TemporaryDirectory() as t:
        vadd = write_inputs(t)
        # What one `stats` adds to the request count, to see that the front
        # answered these from the table without asking the daemon at all.
        per_stats = -d.stats()["requests"] + d.stats()["requests"]
        for args in (["--version"], ["-version"], ["--help"],
                     ["-mtriple=nvptx64", "-mcpu=help", vadd, "-o", "-"],
                     ["-mtriple=nvptx64", "-mattr=help", vadd, "-o", "-"]):
            before = d.stats()["requests"]
            want, got = both(d, args)
            assert want.rc == 0 and (want.stdout or want.stderr), (args, want)
            assert same(want, got), (args, want, got)
            assert d.stats()["requests"] - before == per_stats, (args, "the daemon was asked")


def test_stdin_as_dash_with_input_language():
    """Case 3: -x ir - reads the module from stdin, as llc does."""
    with Daemon(workers=1) as d:
        args = ["-mtriple=nvptx64", "-x", "ir", "-", "-o", "-"]
        want, got = both(d, args, stdin=small_ir("dash"))
        assert want.rc == 0 and b".entry k_dash" in want.stdout and same(want, got), (want, got)
        assert d.stats()["compiles"] == 1


def test_fatal_error_without_crash_diagnostics_exits_1_like_llc():
    """Case 5: LLVM's report_fatal_error without crash diagnostics: llc
    prints "LLVM ERROR: ..." and exits 1 (no SIGABRT), leaving no output
    file; the front does the same from the daemon's answer and from the
    negative entry."""
    with Daemon(workers=1) as d:
        args = ["-mcpu=sm_70", "fatal_no_crash_diag.ll", "-o", "out.s"]
        want, got = both(d, args, ["fatal_no_crash_diag.ll"])
        assert want.rc == 1 and want.files == {} and b"syncscope" in want.stderr, want
        assert same(want, got), (want, got)
        s = d.stats()
        assert s["compiles"] == 1 and s["worker_crashes"] == 0, s
        again = run_in([CLI, "llc"], args, ["fatal_no_crash_diag.ll"], env=front_env(d))
        assert same(want, again), again
        s2 = d.stats()
        assert s2["compiles"] == 1 and s2["hits"] == s["hits"] + 1, s2


def test_unverifiable_module_leaves_empty_output_like_llc():
    """Case 6: a module that does not verify: llc fails after opening its
    output and leaves it, empty; so does the front, also from the cache."""
    with Daemon(workers=1) as d:
        for args in (["-mtriple=nvptx64", "not_verified.ll", "-o", "out.s"],
                     ["-mtriple=nvptx64", "not_verified.ll"]):          # default name
            want, got = both(d, args, ["not_verified.ll"])
            assert want.rc == 1 and list(want.files.values()) == [b""], want
            assert same(want, got), (args, want, got)
        assert d.stats()["compiles"] == 1


def test_llvm_error_lines_end_as_llcs_do():
    """Case 7 and the abort: the stderr of a Cannot-select abort is llc's,
    newline included, up to the crash banner; the front dies of SIGABRT."""
    with Daemon(workers=1) as d:
        args = ["-mcpu=sm_70", "cannot_select.ll", "-o", "-"]
        want, got = both(d, args, ["cannot_select.ll"])
        assert want.rc == -signal.SIGABRT and same(want, got), (want, got)
        assert normalise_stderr(got.stderr).endswith(b"redux.sync.add\n"), got.stderr


def test_worker_that_cannot_start_fails_jobs_fast_and_stops_respawning():
    """Workers that die while starting (a memory cap below what LLVM needs):
    after a few attempts the job fails with the reason, a second request
    fails at once, the daemon stops spawning, and each failure is counted
    and logged."""
    if SANITIZED:
        raise Skip("no worker memory cap under AddressSanitizer")
    with Daemon(workers=1, extra=["--worker-mem", "16M"]) as d:
        t0 = time.time()
        r = d.cli("compile", "--json", "-", input=small_ir("nostart"), check=False, timeout=BOUND_S)
        assert r.returncode != 0 and b'"status":"unavailable"' in r.stdout, r.stdout
        assert b"cannot start" in r.stdout, r.stdout
        assert time.time() - t0 < BOUND_S
        s = d.stats()
        assert s["worker_start_failures"] >= 3 and s["workers_ready"] == 0, s
        r2 = d.cli("compile", "--json", "-", input=small_ir("nostart2"), check=False)
        assert b"cannot start" in r2.stdout, r2.stdout
        time.sleep(2)
        s2 = d.stats()
        assert s2["workers_spawned"] == s["workers_spawned"], (s, s2)
        assert s2["jobs_queued"] == 0, s2
        assert "cannot start" in d.logtext(), d.logtext()[-2000:]


def test_queued_job_dropped_when_its_client_leaves():
    """A job whose only client has gone is dropped before a worker gets it."""
    with Daemon(workers=1) as d:
        (w,) = d.workers()
        os.kill(w, signal.SIGSTOP)
        try:
            busy = Raw(d.socket)
            busy.send(frame(3, mp_pack({"id": 1, "input": small_ir("busy")})))
            gone = Raw(d.socket)
            gone.send(frame(3, mp_pack({"id": 2, "input": small_ir("gone")})))
            deadline = time.time() + 10
            while d.stats()["jobs_queued"] != 1:
                assert time.time() < deadline, d.stats()
                time.sleep(0.02)
            gone.close()
            while d.stats()["jobs_queued"] != 0:
                assert time.time() < deadline, d.stats()
                time.sleep(0.02)
            assert d.stats()["jobs_dropped"] == 1
        finally:
            os.kill(w, signal.SIGCONT)
        t_, body = busy.recv_frame()
        assert mp_unpack(body)["status"] == 0
        assert d.stats()["compiles"] == 1


def test_without_real_llc_unmodelled_option_is_a_clear_error():
    with Daemon(workers=1) as d, tempfile.TemporaryDirectory() as t:
        vadd = write_inputs(t)
        env = dict(front_env(d), PTXCACHE_LLC="none")
        r = subprocess.run([CLI, "llc", "-mtriple=nvptx64", "-print-after-all", vadd, "-o", "-"],
                           capture_output=True, env=env, timeout=BOUND_S)
        assert r.returncode == 1 and b"-print-after-all" in r.stderr, r.stderr
        assert b"PTXCACHE_LLC" in r.stderr, r.stderr
        # What the daemon models still works without llc.
        r = subprocess.run([CLI, "llc", "-mtriple=nvptx64", "-nvptx-short-ptr", vadd, "-o", "-"],
                           capture_output=True, env=env, timeout=BOUND_S)
        assert r.returncode == 0 and b".entry k_vadd" in r.stdout, r.stderr


# ---- the differential command-line test ---------------------------------

def llc_options():
    """(spelling, value form) of every option LLVM 22's llc lists; value
    form is None for a flag, else the first legal value we can give."""
    out = subprocess.run([LLC, "--help-list-hidden"], capture_output=True, text=True,
                         timeout=60).stdout.splitlines()
    opts = []
    for i, line in enumerate(out):
        m = re.match(r"^  (--?[A-Za-z0-9][A-Za-z0-9_.-]*)(=<([^>]*)>| <[^>]*>)?\s+- ", line)
        if not m:
            continue
        name, kind = m.group(1), m.group(3)
        if m.group(2) and not kind:
            continue                            # "-x <string>": positional value
        if kind is None:
            opts.append((name, None))
        elif kind in ("uint", "int", "ulong", "N", "number"):
            opts.append((name, "1"))
        elif kind == "value":
            # The alternatives follow, indented: "    =name   - ...".
            for alt in out[i + 1:i + 40]:
                am = re.match(r"^    =([A-Za-z0-9_.-]+)\s", alt)
                if am:
                    opts.append((name, am.group(1)))
                    break
                if not alt.startswith("     "):
                    break
        # <string>, <filename>, <directory>, <pass-name>, ...: options that
        # name files or passes are left to the longer run's judgement.
    return opts


def backend_table():
    """The allow-list of proto/llc_args.c, as the daemon has it."""
    with open(os.path.join(ROOT, "proto", "llc_args.c")) as f:
        src = f.read()
    body = src[src.index("backend_opts[] = {"):]
    body = body[:body.index("};")]
    body = re.sub(r"/\*.*?\*/", "", body, flags=re.S)
    return re.findall(r'"([^"]+)"', body)


# Options whose effect is outside the process's output (a window, a
# debugger trap, a plugin) or that wait: never run in a test.
NEVER = re.compile(r"^--?(view-|load|pass-plugin|debug-counter-break|.*-dot|"
                   r"crash-diagnostics-dir|.*-viewer|x86-|aarch64-|amdgpu-|arm-|hexagon-|"
                   r"ppc-|riscv-|sparc-|wasm-|bpf-|mips-|avr-|lanai-|msp430-|spv-|loongarch-|"
                   r"systemz-|ve-|xcore-|csky-|m68k-|xtensa-|r600-|gcn-|si-|amdhsa-)")


def invocations(full):
    """The differential's command lines: every option the table models and
    every option llc lists (a fixed sample of them in `make test`, all
    with full=True), crossed with valid, unverifiable and aborting
    inputs."""
    listed = [(n, v) for n, v in llc_options() if not NEVER.match(n)]
    table = backend_table()
    modelled = [(n, v) for n, v in listed
                if any(n.lstrip("-").startswith(e[:-1]) if e.endswith("*") else
                       n.lstrip("-") == e.rstrip("=") for e in table)]
    others = [o for o in listed if o not in modelled]
    if not full:
        others = random.Random(22).sample(others, min(len(others), 140))
    inputs = [("vadd.ll", ["-mtriple=nvptx64", "-mcpu=sm_90a"]),
              ("not_verified.ll", ["-mtriple=nvptx64"]),
              ("cannot_select.ll", ["-mcpu=sm_70"]),
              ("fatal_no_crash_diag.ll", ["-mcpu=sm_70"])]
    runs = []
    for n, v in modelled + others:
        arg = n if v is None else "%s=%s" % (n, v)
        for inp, base in inputs if (n, v) in modelled else inputs[:1]:
            runs.append((base + [arg, inp, "-o", "out.s"], inp))
    return runs, len(modelled) + len(others)


def differential(full):
    with Daemon(workers=2) as d, tempfile.TemporaryDirectory() as t:
        vadd = write_inputs(t)
        runs, noptions = invocations(full)
        runs = corpus_third(runs)
        bad, llc_hangs, llc_unstable = [], [], []
        for args, inp in runs:
            files = [vadd if inp == "vadd.ll" else inp]
            want = run_in([LLC], args, files)
            if want.rc == "timeout":
                # llc itself does not finish (--print-mir2vec waits): the
                # front, which runs that very llc for it, cannot either.
                llc_hangs.append(" ".join(args))
                continue
            got = run_in([CLI, "llc"], args, files, env=front_env(d))
            if not same(want, got, stderr=False):
                # llc itself may not agree with itself (--print-mir2vec
                # reads memory it never set): then the front, which runs
                # that llc, is not the one to blame.
                again = run_in([LLC], args, files)
                if same(want, again, stderr=False):
                    bad.append((args, want, got))
                else:
                    llc_unstable.append(" ".join(args))
        s = d.stats()
        print("     llc differential: %d invocations, %d options, %d disagreements, "
              "%d where llc itself hangs %s, %d where two llc runs differ %s; daemon: "
              "%d compiles, %d workers spawned, %d start failures" %
              (len(runs), noptions, len(bad), len(llc_hangs), llc_hangs[:3], len(llc_unstable),
               llc_unstable[:3], s["compiles"], s["workers_spawned"],
               s["worker_start_failures"]))
        assert not bad, "\n".join("%s:\n  llc   %r\n  front %r" % b for b in bad[:10])
        # Option sets a worker cannot start with (-code-model=tiny: LLVM's
        # fatal error in the warm-up) are deterministic: one attempt each,
        # then the front's real llc answers; never a respawn loop.
        starts = re.findall(r"cannot start: .* \((deterministic|attempt)", d.logtext())
        assert len(starts) == s["worker_start_failures"] and \
            set(starts) <= {"deterministic"}, starts
        assert s["jobs_queued"] == 0, s
        return s


def test_differential_llc_command_lines():
    """Several hundred llc command lines, generated from llc's own option
    list: the same exit status or signal, stdout and output file bytes,
    each within the bound: a third of them (PTXCACHE_CORPUS_FULL=1: all);
    PTXCACHE_LLC_DIFF_FULL=1 generates one for every option."""
    differential(bool(os.environ.get("PTXCACHE_LLC_DIFF_FULL")))


def test_output_to_device_fifo_and_symlink_is_written_through():
    """-o /dev/null, a FIFO or a symbolic link: written through, as llc
    does; never replaced by a regular file (as root, a rename over
    /dev/null would break the whole machine)."""
    import stat
    import threading
    with Daemon(workers=1) as d, tempfile.TemporaryDirectory() as t:
        vadd = write_inputs(t)
        want = subprocess.run([LLC, "-mtriple=nvptx64", vadd, "-o", "-"], capture_output=True).stdout
        env = front_env(d)
        r = subprocess.run([CLI, "llc", "-mtriple=nvptx64", vadd, "-o", os.devnull], env=env,
                           capture_output=True, timeout=BOUND_S)
        assert r.returncode == 0 and stat.S_ISCHR(os.stat(os.devnull).st_mode), r.stderr
        target = os.path.join(t, "target.s")
        link = os.path.join(t, "link.s")
        os.symlink(target, link)
        subprocess.run([CLI, "llc", "-mtriple=nvptx64", vadd, "-o", link], env=env, check=True,
                       timeout=BOUND_S)
        assert os.path.islink(link) and open(target, "rb").read() == want
        fifo = os.path.join(t, "fifo.s")
        os.mkfifo(fifo)
        got = []
        reader = threading.Thread(target=lambda: got.append(open(fifo, "rb").read()))
        reader.start()
        subprocess.run([CLI, "llc", "-mtriple=nvptx64", vadd, "-o", fifo], env=env, check=True,
                       timeout=BOUND_S)
        reader.join(BOUND_S)
        assert got == [want] and stat.S_ISFIFO(os.stat(fifo).st_mode)
