# SPDX-License-Identifier: Apache-2.0
"""The programs where Debian 12 is not: glibc 2.28 as the floor, an older
system, and aarch64.

- Both wheels (x86_64 built through pip as tests/test_wheel.py builds it;
  aarch64 by `make wheel ARCH=aarch64`, cross-compiled) are tagged
  manylinux_2_28 or lower, and that tag is what their programs import,
  read again here with readelf.
- Debian 11 (glibc 2.31, Python 3.9; tests/sysroot.py's debian11()): a
  fresh venv, pip install --no-index of the x86_64 wheel, and with no
  daemon anywhere, a first process's artifact puts start the user's own
  daemon and a second process gets them back; `ptxcache compile` of
  corpus kernels gives the bytes of LLVM 22's llc, run on this machine;
  `python3 -m ptxcache status` names the user's own daemon.
- aarch64 under qemu-user: the aarch64 wheel's programs in a root of
  Debian 11's arm64 C library: --version, a daemon whose workers (its
  own binary, exec'd: through binfmt_misc) compile corpus kernels to the
  bytes of this machine's x86_64 llc, for the aarch64 CLI and for this
  machine's x86_64 CLI on the same socket, and an artifact round trip.
  What qemu-user gives the sandbox is printed (it emulates no seccomp
  and no Landlock: the daemon says so and runs its workers with
  no_new_privs alone).

Skipped under make check-asan (the programs are the static ones) and in
the Debian package's build, as tests/test_wheel.py is; needs root.
"""
import json
import os
import re
import shutil
import subprocess
import time
import zipfile

import sysroot
import test_wheel as wheels
from harness import BUILD, CLI, ROOT, TRITON_FLAGS, llc, triton_kernels
from sysroot import Root

# tests/run.py: one after another with the other files of this group (they build build-static/).
GROUP = "static"
# tests/run.py: left out of make check-asan.
NOT_UNDER_SANITIZERS = "the static and cross-built programs alone"

FLOOR = (2, 28)
ARCH_WHEEL_DIR = os.path.join(BUILD, "wheel-test-aarch64")
_cache = {}


def aarch64_wheel():
    wheels.need_wheel_context()
    sysroot.need_root()
    if "w" not in _cache:
        shutil.rmtree(ARCH_WHEEL_DIR, ignore_errors=True)
        r = subprocess.run(["make", "-C", ROOT, "--no-print-directory", "wheel", "ARCH=aarch64",
                            "WHEEL_DIR=" + ARCH_WHEEL_DIR], capture_output=True, text=True,
                           timeout=3600)
        assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
        found = [f for f in os.listdir(ARCH_WHEEL_DIR) if f.endswith(".whl")]
        assert len(found) == 1, found
        _cache["w"] = os.path.join(ARCH_WHEEL_DIR, found[0])
    return _cache["w"]


def programs(wheel, into):
    """The wheel's two programs, unpacked into a directory; their paths."""
    out = {}
    with zipfile.ZipFile(wheel) as z:
        for n in z.namelist():
            m = re.fullmatch(r"[^/]+\.data/scripts/(ptxcached|ptxcache)", n)
            if m:
                out[m.group(1)] = os.path.join(into, m.group(1))
                with open(out[m.group(1)], "wb") as f:
                    f.write(z.read(n))
                os.chmod(out[m.group(1)], 0o755)
    assert sorted(out) == ["ptxcache", "ptxcached"], out
    return out


def glibc_imports(path):
    """The GLIBC_x.y versions a program imports, and the libraries it
    needs, by readelf (any architecture)."""
    syms = subprocess.run(["readelf", "--dyn-syms", "-W", path], capture_output=True, text=True,
                          check=True).stdout
    versions = {(int(a), int(b)) for a, b in re.findall(r"@GLIBC_(\d+)\.(\d+)", syms)}
    dyn = subprocess.run(["readelf", "-d", "-W", path], capture_output=True, text=True,
                         check=True).stdout
    return versions, set(re.findall(r"Shared library: \[([^\]]+)\]", dyn))


def check_wheel(wheel, arch, machine, tmp):
    m = re.fullmatch(r"ptxcache-[\d.]+-py3-none-manylinux_(\d+)_(\d+)_%s\.whl" % arch,
                     os.path.basename(wheel))
    assert m, wheel
    tag = (int(m.group(1)), int(m.group(2)))
    newest = (0, 0)
    for name, p in programs(wheel, tmp).items():
        versions, needed = glibc_imports(p)
        assert needed <= wheels.GLIBC_LIBS | {"ld-linux-aarch64.so.1"}, (name, needed)
        header = subprocess.run(["readelf", "-h", p], capture_output=True, text=True).stdout
        assert re.search(r"Machine:\s+%s" % machine, header), (name, header)
        newest = max(newest, max(versions))
    assert tag == newest <= FLOOR, (os.path.basename(wheel), newest)
    return "%s: manylinux_%d_%d, %.1f MB" % (arch, tag[0], tag[1], os.path.getsize(wheel) / 1e6)


def test_both_wheels_need_nothing_newer_than_glibc_2_28():
    tmp = os.path.join(BUILD, "oldsystem-tags")
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(tmp)
    try:
        a = check_wheel(wheels.wheel(), "x86_64", "Advanced Micro Devices X86-64", tmp)
        b = check_wheel(aarch64_wheel(), "aarch64", "AArch64", tmp)
        print(a + "; " + b)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def kernels(n):
    """n corpus kernels of different sizes, and llc-22's PTX of each, here."""
    ks = sorted(triton_kernels(), key=os.path.getsize)
    pick = [ks[i * (len(ks) - 1) // max(1, n - 1)] for i in range(n)]
    out = []
    for k in pick:
        r = llc(TRITON_FLAGS + [k, "-o", "-"])
        assert r.returncode == 0, k
        out.append((k, r.stdout))
    return out


def wait_for(pred, what, limit=120):
    deadline = time.time() + limit
    while not pred():
        assert time.time() < deadline, what
        time.sleep(0.1)


# ---- Debian 11 -----------------------------------------------------------------

def test_wheel_on_debian_11_starts_the_users_daemon_and_serves_llc_s_bytes():
    wheel = wheels.wheel()
    with Root(sysroot.debian11()) as r:
        i = r.inside
        r.run(["/usr/bin/python3", "-c", "import sys, platform; "
               "assert sys.version_info[:2] == (3, 9), sys.version; "
               "assert platform.libc_ver() == ('glibc', '2.31'), platform.libc_ver()"])
        shutil.copy(wheel, r.scratch)
        shutil.copytree(wheels.STUBS, os.path.join(r.scratch, "jitstubs"))
        r.run(["/usr/bin/python3", "-m", "venv", i + "/venv"])
        r.run([i + "/venv/bin/pip", "--disable-pip-version-check", "--no-cache-dir", "install",
               "--no-index", i + "/" + os.path.basename(wheel)], env={"PATH": "/usr/bin:/bin", "HOME": i})
        env = {"PATH": i + "/venv/bin:/usr/bin:/bin", "HOME": i, "XDG_RUNTIME_DIR": i + "/run",
               "XDG_CACHE_HOME": i + "/cache", "PTXCACHE_NODE_SOCKET": i + "/node/ptxcached.sock",
               "PTXCACHE_TORCH": "1", "PYTHONPATH": i + "/jitstubs", "PYTHONDONTWRITEBYTECODE": "1",
               "LANG": "C.UTF-8"}
        sock = r.host_path(i + "/run/ptxcache/ptxcached.sock")

        def status():
            s = r.run([i + "/venv/bin/python", "-m", "ptxcache", "status", "--json", "--no-import"],
                      env=env, check=False)     # 1 while no daemon is reachable
            return json.loads(s.stdout)

        def job(*args, **extra):
            p = r.run([i + "/venv/bin/python", i + "/jitstubs/jobs.py"] + list(args),
                      env=dict(env, **extra))
            return json.loads([ln for ln in p.stdout.decode().splitlines() if ln.startswith("{")][-1])

        assert status()["daemon"]["in_use"] == "none" and not os.path.exists(sock)
        first = job("triton", "OLDKEY", "k", i + "/marks", TRITON_CACHE_DIR=i + "/t1")
        assert first["result"] == "compiled", first
        assert os.path.exists(sock)
        second = job("triton", "OLDKEY", "k", i + "/marks", TRITON_CACHE_DIR=i + "/t2")
        assert second["result"] == "hit" and second["files"] == first["files"], second
        d = status()["daemon"]
        assert d["in_use"] == "own" and d["started_by_client"] and d["same_version"], d
        masters = [p for p in r.processes() if p.split()[0] == i + "/venv/bin/ptxcached"]
        assert len(masters) == 1, r.processes()

        os.makedirs(os.path.join(r.scratch, "k"))
        for k, want in kernels(6):
            shutil.copy(k, os.path.join(r.scratch, "k"))
            got = r.run([i + "/venv/bin/ptxcache", "compile", "--arch", "sm_90a", "--ptx-isa", "90",
                         "-O3", i + "/k/" + os.path.basename(k)], env=env)
            assert got.stdout == want, "PTX of %s differs from llc-22's" % k
        st = json.loads(r.run([i + "/venv/bin/ptxcache", "stats", "--json"], env=env).stdout)
        assert st["compiles"] >= 6 and st["artifact_hits"] >= 1, st


# ---- aarch64 under qemu-user ---------------------------------------------------

def test_aarch64_daemon_under_qemu_serves_llc_s_bytes():
    wheel = aarch64_wheel()
    with Root(sysroot.aarch64()) as r:
        i = r.inside
        progs = programs(wheel, r.scratch)
        d, c = i + "/ptxcached", i + "/ptxcache"
        env = {"PATH": "/usr/bin:/bin", "HOME": i, "PTXCACHE_SOCKET": i + "/run/s.sock"}
        v = r.run([d, "--version"], env=env).stdout.decode()
        assert "host aarch64" in v and "LLVM 22" in v, v
        log = os.path.join(r.scratch, "daemon.log")
        with open(log, "wb") as f:
            daemon = r.run([d, "--socket", i + "/run/s.sock", "--cache-dir", i + "/cache", "--workers",
                            "2", "--log-level", "info"], env=env, popen=f)
        try:
            wait_for(lambda: r.run([c, "ping"], env=env, check=False).returncode == 0,
                     "the aarch64 daemon never answered a ping")
            os.makedirs(os.path.join(r.scratch, "k"))
            ks = kernels(5)
            for k, want in ks:
                shutil.copy(k, os.path.join(r.scratch, "k"))
                inside = i + "/k/" + os.path.basename(k)
                got = r.run([c, "llc"] + TRITON_FLAGS + [inside, "-o", "-"], env=env, timeout=600)
                assert got.stdout == want, "aarch64's PTX of %s differs from x86_64's llc" % k
                # The same socket from this machine's own x86_64 CLI: a hit,
                # the same bytes.
                host = subprocess.run([CLI, "llc"] + TRITON_FLAGS + [k, "-o", "-"],
                                      capture_output=True, timeout=120,
                                      env=dict(os.environ, PTXCACHE_SOCKET=r.host_path(i + "/run/s.sock")))
                assert host.returncode == 0 and host.stdout == want, host.stderr
            st = json.loads(r.run([c, "stats", "--json"], env=env).stdout)
            assert st["compiles"] == len(ks) and st["hits"] >= len(ks), st
            with open(os.path.join(r.scratch, "value"), "wb") as f:
                f.write(os.urandom(100000))
            r.run([c, "artifact", "put", "triton", "arm-key", i + "/value"], env=env)
            back = r.run([c, "artifact", "get", "triton", "arm-key"], env=env).stdout
            assert back == open(os.path.join(r.scratch, "value"), "rb").read()
        finally:
            daemon.kill()
            daemon.wait()
        sandbox = [ln for ln in open(log, errors="replace") if "sandbox" in ln]
        print("under qemu-user: %s" % (sandbox[0].split(": ", 1)[-1] if sandbox else "sandbox complete"))
