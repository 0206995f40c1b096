# SPDX-License-Identifier: Apache-2.0
"""ptxcache.jax: JAX's persistent compilation cache on the real daemon,
through the CacheInterface JAX calls, in real child processes
(tests/jitstubs/jax stands in for JAX 0.11's compiler and cache modules,
which this machine does not have; tests/jitstubs/jaxjobs.py is the
program). A second process hits; concurrent processes (and threads)
compile each computation once; a write JAX skips or a compile that fails
lets the waiters go at once; a daemon that is down is JAX without the
package; another uid sees nothing; a user's cache directory.
"""
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

from harness import Daemon, Skip
from sysutil import make_reachable, setpriv
from test_python import NOBODY, PKG, STUBS, clean_env, need_artifacts, warnings_in

NOT_UNDER_SANITIZERS = "the Python package's own logic; the daemon's artifact paths are test_artifact's"

JOBS = os.path.join(STUBS, "jaxjobs.py")


def jenv(tmp, sock=None, **extra):
    env = clean_env(tmp, sock, JAXJOB_INSTALL="1", JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS="0",
                    JAXSTUB_MARKS=os.path.join(tmp, "marks"))
    env = {k: v for k, v in env.items() if not k.startswith("JAX_") or k in extra
           or k == "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS"}
    env.update(extra)
    return env


def start(env, names, *args, python=None):
    return subprocess.Popen([python or sys.executable, JOBS, names] + list(args), env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def result(p, timeout=60):
    try:
        out, err = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        p.kill()
        out, err = p.communicate()
        raise AssertionError("the job did not finish in %d s: %s" % (timeout, err[-2000:]))
    assert p.returncode == 0, (p.returncode, out, err)
    lines = [line for line in out.splitlines() if line.startswith("{")]
    assert lines, (out, err)
    return json.loads(lines[-1]), err


def compiles(tmp, name=None):
    d = os.path.join(tmp, "marks")
    fs = os.listdir(d) if os.path.isdir(d) else []
    return [f for f in fs if name is None or f.startswith("compile.%s." % name)]


def wait_compiling(tmp, name, p):
    deadline = time.time() + 30
    while not compiles(tmp, name):
        assert time.time() < deadline and p.poll() is None, p.communicate()
        time.sleep(0.02)


def test_jax_a_second_process_hits_with_no_cache_directory():
    """No jax_compilation_cache_dir: JAX uses the daemon. A second process
    gets the executable (no compile) equal to the first's; PTXCACHE_JAX=0
    leaves JAX as it is (no directory: no cache, it compiles)."""
    tmp = tempfile.mkdtemp(prefix="ptxcache-jax-")
    try:
        with Daemon(workers=1) as d:
            need_artifacts(d)
            env = jenv(tmp, d.socket)
            r1, err1 = result(start(env, "jit_f,jit_g"))
            assert r1["how"] == "on import", r1
            assert r1["installed"] == {"jax": "0.11.0", "cache": "ptxcache", "compile": "wrapped",
                                       "dir": ""}, r1
            assert [v[0] for v in r1["results"].values()] == ["compiled", "compiled"], r1
            assert r1["counts"]["puts"] == 2 and r1["counts"]["leases"] == 2, r1
            r2, err2 = result(start(env, "jit_f,jit_g"))
            assert r2["results"] == {k: ["hit", v[1]] for k, v in r1["results"].items()}, r2
            assert len(compiles(tmp)) == 2
            assert not warnings_in(err1 + err2), err1 + err2
            r3, _ = result(start(dict(env, PTXCACHE_JAX="0"), "jit_f"))
            assert r3["how"] == "off" and r3["results"]["jit_f"][0] == "compiled", r3
            assert r3["installed"]["cache"] == "none", r3
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def test_jax_four_processes_compile_each_computation_once():
    """Four processes on a cold daemon, each compiling two computations in
    two threads at once: each computation is compiled once in all."""
    tmp = tempfile.mkdtemp(prefix="ptxcache-jax-")
    try:
        with Daemon(workers=1) as d:
            need_artifacts(d)
            env = jenv(tmp, d.socket, JAXSTUB_SLEEP="1.5")
            procs = [start(env, "jit_a,jit_b", "--threads") for _ in range(4)]
            res = [result(p) for p in procs]
            assert len(compiles(tmp, "jit_a")) == 1 and len(compiles(tmp, "jit_b")) == 1, compiles(tmp)
            for name in ("jit_a", "jit_b"):
                got = sorted(r["results"][name][0] for r, _ in res)
                assert got == ["compiled", "hit", "hit", "hit"], (name, res)
                assert len({r["results"][name][1] for r, _ in res}) == 1, res
            s = d.stats()
            assert s["artifact_waits"] >= 1 and s["artifact_wait_hits"] >= 1, s
            assert not any(warnings_in(err) for _, err in res), res
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def test_jax_a_write_jax_skips_or_a_failed_compile_lets_the_waiters_go():
    """The producer's compile is quicker than the minimum compile time (JAX
    does not write it), or it fails; the producer then stays alive,
    compiling nothing more. Its lease is released as its compile ends, so
    the waiters (on a daemon whose lease timeout is 600 s) are answered
    found: false and compile for themselves."""
    tmp = tempfile.mkdtemp(prefix="ptxcache-jax-")
    try:
        with Daemon(workers=1, extra=["--artifact-lease-timeout", "600"]) as d:
            need_artifacts(d)
            for name, extra in (("jit_quick", {"JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "100"}),
                                ("jit_broken", {"JAXSTUB_FAIL": "jit_broken"})):
                env = jenv(tmp, d.socket, JAXSTUB_SLEEP="1", **extra)
                before = d.stats()["artifact_lease_releases"]
                a = start(env, name, "--hold", "30")
                wait_compiling(tmp, name, a)      # a holds the lease, and compiles
                waiters = [start(dict(env, JAXSTUB_SLEEP="0"), name) for _ in range(2)]
                res = [result(p, timeout=45) for p in waiters]
                want = "failed" if name == "jit_broken" else "compiled"
                assert [r["results"][name][0] for r, _ in res] == [want, want], res
                assert len(compiles(tmp, name)) == 3, compiles(tmp, name)
                assert a.poll() is None         # the producer is still alive
                assert d.stats()["artifact_lease_releases"] >= before + 1, d.stats()
                a.kill()
                a.communicate()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def test_jax_daemon_down_is_jax_without_the_package():
    """The daemon killed: JAX compiles each computation as it would
    without the package, with equal executables, one warning, and no cache
    error reported by JAX itself."""
    tmp = tempfile.mkdtemp(prefix="ptxcache-jax-")
    try:
        d = Daemon(workers=1)
        try:
            need_artifacts(d)
            env = jenv(tmp, d.socket, PTXCACHE_SILENCE_MS="2000")
            plain, _ = result(start(dict(env, PTXCACHE_JAX="0"), "jit_f,jit_g"))
            d.stop(signal.SIGKILL)
            r, err = result(start(env, "jit_f,jit_g"))
            assert r["installed"]["cache"] == "ptxcache", r
            assert r["results"] == {k: ["compiled", v[1]] for k, v in plain["results"].items()}, r
            assert len(warnings_in(err)) == 1, err
            assert "Error reading persistent compilation cache" not in err, err
            assert "Error writing persistent compilation cache" not in err, err
        finally:
            d.cleanup()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def test_jax_a_users_cache_directory_gives_way_to_the_daemon_once_logged():
    """jax_compilation_cache_dir set: JAX keeps one cache, the daemon's
    (logged once); the directory gets no executable, and a process without
    the directory hits what the first stored."""
    tmp = tempfile.mkdtemp(prefix="ptxcache-jax-")
    try:
        with Daemon(workers=1) as d:
            need_artifacts(d)
            env = jenv(tmp, d.socket)
            udir = os.path.join(tmp, "userdir")
            r1, err1 = result(start(env, "jit_f,jit_g", "--dir", udir))
            assert r1["installed"]["cache"] == "ptxcache" and r1["installed"]["dir"] == udir, r1
            assert err1.count("jax_compilation_cache_dir is set") == 1 and len(warnings_in(err1)) == 1, err1
            assert not (os.path.isdir(udir) and os.listdir(udir)), os.listdir(udir)
            r2, _ = result(start(env, "jit_f,jit_g"))
            assert [v[0] for v in r2["results"].values()] == ["hit", "hit"], r2
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def test_jax_another_uid_sees_nothing():
    if os.geteuid() != 0:
        raise Skip("needs root to run a client as another uid")
    tmp = tempfile.mkdtemp(prefix="ptxcache-jax-")
    try:
        os.chmod(tmp, 0o755)
        shared = os.path.join(tmp, "shared")
        shutil.copytree(PKG, os.path.join(shared, "python"),
                        ignore=shutil.ignore_patterns("__pycache__"))
        shutil.copytree(STUBS, os.path.join(shared, "stubs"),
                        ignore=shutil.ignore_patterns("__pycache__"))
        with Daemon(workers=1, extra=["--allow-users", str(NOBODY)]) as d:
            need_artifacts(d)
            make_reachable(d.socket)
            env = jenv(tmp, d.socket)
            r1, _ = result(start(env, "jit_f"))
            assert r1["results"]["jit_f"][0] == "compiled", r1
            other = os.path.join(tmp, "other")
            os.makedirs(other)
            for root, dirs, files in os.walk(tmp):
                os.chmod(root, 0o777 if root == other or root.startswith(other + "/") else 0o755)
                for f in files:
                    os.chmod(os.path.join(root, f), 0o644)
            oenv = dict(jenv(other, d.socket),
                        PYTHONPATH=os.path.join(shared, "python") + os.pathsep
                        + os.path.join(shared, "stubs"))
            p = subprocess.Popen(setpriv(NOBODY, NOBODY) + [sys.executable,
                                 os.path.join(shared, "stubs", "jaxjobs.py"), "jit_f"],
                                 env=oenv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            r2, err2 = result(p)
            assert r2["results"]["jit_f"] == ["compiled", r1["results"]["jit_f"][1]], r2
            assert r2["counts"]["hits"] == 0 and not r2["counts"]["errors"], r2
            assert r2["counts"]["puts"] == 1, r2
            r3, _ = result(start(env, "jit_f"))
            assert r3["results"]["jit_f"][0] == "hit", r3
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def test_jax_a_quick_compile_is_stored_unless_the_user_set_a_minimum():
    """JAX stores only compiles of a second and more by default; with the
    daemon every compile is stored (a fresh process then compiles nothing),
    unless the user set the minimum: then JAX's rule, the user's value."""
    tmp = tempfile.mkdtemp(prefix="ptxcache-jax-")
    try:
        with Daemon(workers=1) as d:
            need_artifacts(d)
            env = jenv(tmp, d.socket)
            del env["JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS"]
            first, _ = result(start(env, "jit_small"))
            second, _ = result(start(env, "jit_small"))
            assert first["results"]["jit_small"][0] == "compiled", first
            assert second["results"]["jit_small"] == ["hit", first["results"]["jit_small"][1]], second
            env["JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS"] = "100"
            for _ in range(2):
                r, _ = result(start(env, "jit_other"))
                assert r["results"]["jit_other"][0] == "compiled", r
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
