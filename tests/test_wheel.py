# SPDX-License-Identifier: Apache-2.0
"""`pip install ptxcache` end to end, as the user of a virtual environment
gets it: the wheel built through its PEP 517 hooks (pip wheel
--no-build-isolation --no-index, the tree's own backend, make STATIC=1),
its tag checked against the glibc symbol versions its programs import, the
sdist building the same wheel; then a fresh venv (no system site
packages), pip install --no-index, and with no daemon anywhere (private
XDG_RUNTIME_DIR, HOME, XDG_CACHE_HOME and node socket) the PyTorch and
Triton stand-ins (tests/jitstubs/) run twice in fresh processes: the first
starts the user's own daemon, the second is served by it; the daemon exits
when idle; eight clients started at once (Python jobs and the C llc front)
start one daemon; pip uninstall leaves nothing but the cache. Where a node
service answers (a harness daemon on the socket given as the node's), it
is used and nothing is started.

The wheel is built once per run, into BUILD/wheel-test/ (the static build
it runs is incremental, in build-static/). Skipped under make check-asan
(its programs are the static ones, not the sanitized build) and inside the
Debian package's build (the wheel is another package of the same tree:
make wheel, and CI's lone clone, build it).
"""
import base64
import csv
import hashlib
import io
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
import zipfile

from harness import BUILD, ROOT, SANITIZED, TRITON_FLAGS, Daemon, Skip, small_ir

# tests/run.py: one after another with the other files of this group (they build build-static/).
GROUP = "static"
# tests/run.py: left out of make check-asan.
NOT_UNDER_SANITIZERS = "the wheel holds the static programs"

STUBS = os.path.join(ROOT, "tests", "jitstubs")
JOBS = os.path.join(STUBS, "jobs.py")
WHEEL_DIR = os.path.join(BUILD, "wheel-test")
STATIC_B = os.path.join(ROOT, "build-static")
GLIBC_LIBS = {"libc.so.6", "libm.so.6", "libdl.so.2", "librt.so.1", "libpthread.so.0",
              "ld-linux-x86-64.so.2"}
IDLE_EXIT = 3
_cache = {}


def need_wheel_context():
    if SANITIZED:
        raise Skip("the wheel's programs are the static build, not the sanitized one: "
                   "make test runs this")
    if os.environ.get("PTXCACHE_PACKAGE_BUILD"):
        raise Skip("inside the Debian package's build: the wheel is another package of the "
                   "tree (make wheel; CI's lone clone runs this)")


def python():
    """The interpreter of the venv: Debian's where there is one."""
    return "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else sys.executable


def wheel():
    """The wheel, built once per run through pip's PEP 517 path."""
    need_wheel_context()
    if "wheel" not in _cache:
        shutil.rmtree(WHEEL_DIR, ignore_errors=True)
        os.makedirs(WHEEL_DIR)
        t0 = time.time()
        r = subprocess.run([python(), "-m", "pip", "wheel", "--no-build-isolation", "--no-index",
                            "--no-deps", "--no-cache-dir", "-w", WHEEL_DIR, ROOT],
                           capture_output=True, text=True, timeout=1800,
                           env=dict(os.environ, PTXCACHE_WHEEL_B=STATIC_B))
        assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
        found = [f for f in os.listdir(WHEEL_DIR) if f.endswith(".whl")]
        assert len(found) == 1, found
        _cache["wheel"] = os.path.join(WHEEL_DIR, found[0])
        _cache["wheel_s"] = time.time() - t0
    return _cache["wheel"]


def record_ok(z):
    """Every file of the wheel is in RECORD with its SHA-256 and size."""
    di = [n for n in z.namelist() if n.endswith(".dist-info/RECORD")]
    assert len(di) == 1, di
    rows = {r[0]: r[1:] for r in csv.reader(io.StringIO(z.read(di[0]).decode()))}
    assert set(rows) == set(z.namelist()), set(rows) ^ set(z.namelist())
    for name, (digest, size) in rows.items():
        if name == di[0]:
            continue
        data = z.read(name)
        want = "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        assert digest == want and int(size) == len(data), name
    return rows


def test_wheel_is_tagged_by_the_glibc_its_programs_need():
    w = wheel()
    name = os.path.basename(w)
    m = re.fullmatch(r"ptxcache-(\d+\.\d+\.\d+)-py3-none-manylinux_(\d+)_(\d+)_x86_64\.whl", name)
    assert m, name
    tmp = tempfile.mkdtemp(prefix="ptxcache-whl-")
    try:
        with zipfile.ZipFile(w) as z:
            record_ok(z)
            names = set(z.namelist())
            dist = "ptxcache-%s" % m.group(1)
            for f in ("ptxcache/__init__.py", "ptxcache/autostart.py", "ptxcache/client.py",
                      "ptxcache.pth", dist + ".data/scripts/ptxcached", dist + ".data/scripts/ptxcache",
                      dist + ".dist-info/METADATA", dist + ".dist-info/WHEEL"):
                assert f in names, (f, sorted(names))
            # No ptxas or llc of the wheel's own to shadow the real tools.
            assert not [n for n in names if re.search(r"/(ptxas|llc)$", n)], names
            assert "Root-Is-Purelib: false" in z.read(dist + ".dist-info/WHEEL").decode()
            progs = []
            for p in ("ptxcached", "ptxcache"):
                info = z.getinfo(dist + ".data/scripts/" + p)
                assert (info.external_attr >> 16) & 0o111, p     # executable
                out = os.path.join(tmp, p)
                with open(out, "wb") as f:
                    f.write(z.read(info))
                progs.append(out)
        # The tag, worked out again: the highest GLIBC_x.y the programs
        # import, and no shared library but glibc's.
        best = (0, 0)
        for p in progs:
            dyn = subprocess.run(["objdump", "-p", p], capture_output=True, text=True).stdout
            needed = set(re.findall(r"NEEDED\s+(\S+)", dyn))
            assert needed and needed <= GLIBC_LIBS, (p, needed)
            syms = subprocess.run(["objdump", "-T", p], capture_output=True, text=True).stdout
            for a, b in re.findall(r"GLIBC_(\d+)\.(\d+)", syms):
                best = max(best, (int(a), int(b)))
        assert (int(m.group(2)), int(m.group(3))) == best, (name, best)
        assert os.path.getsize(w) < 64 << 20, os.path.getsize(w)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _ignore_rules():
    """.gitignore's patterns as (glob, anchored at ROOT, directories only).
    Only the forms it uses are understood; any other is a failure, not a
    guess."""
    rules = []
    with open(os.path.join(ROOT, ".gitignore")) as f:
        for line in f:
            p = line.strip()
            if not p or p.startswith("#"):
                continue
            anchored, dir_only = p.startswith("/"), p.endswith("/")
            p = p.strip("/")
            assert "/" not in p and not p.startswith("!") and "**" not in p, \
                "a .gitignore pattern this test does not understand: %r" % line
            rules.append((p, anchored, dir_only))
    return rules


def tree_files():
    """The files of the source tree, relative to ROOT, found by walking it:
    .git, what .gitignore excludes and (in a git checkout) untracked files
    left out."""
    import fnmatch
    rules = _ignore_rules()

    def ignored(rel, is_dir):
        name = os.path.basename(rel)
        return any(fnmatch.fnmatchcase(name, p) and (is_dir or not d) and
                   (not a or os.path.dirname(rel) == "") for p, a, d in rules)
    out = set()
    for root, dirs, files in os.walk(ROOT):
        rel_root = os.path.relpath(root, ROOT)
        rel_root = "" if rel_root == "." else rel_root
        dirs[:] = [d for d in dirs if d != ".git" and
                   not ignored(os.path.join(rel_root, d), True)]
        for f in files:
            rel = os.path.join(rel_root, f)
            if f != ".git" and not ignored(rel, False) and os.path.isfile(os.path.join(ROOT, rel)):
                out.add(rel)
    if os.path.exists(os.path.join(ROOT, ".git")):
        # Untracked files, and what the checkout's own excludes name
        # (.git/info/exclude: a GPU run's carry folder), whole folders at once.
        for extra in (["--exclude-standard"], ["--ignored", "--exclude-standard", "--directory"]):
            r = subprocess.run(["git", "-C", ROOT, "ls-files", "-z", "--others"] + extra,
                               capture_output=True, check=True)
            for f in r.stdout.decode().split("\0"):
                if f.endswith("/"):
                    out = {o for o in out if not o.startswith(f)}
                elif f:
                    out.discard(f)
    else:
        # Not a checkout: an unpacked sdist, which carries its MANIFEST.
        assert "MANIFEST" in out, "neither a git checkout nor an sdist's tree: %s" % ROOT
    return out


def test_wheel_sdist_holds_the_tree_and_builds_the_same_wheel():
    w = wheel()
    tmp = tempfile.mkdtemp(prefix="ptxcache-sdist-")
    try:
        code = ("import sys; sys.path.insert(0, %r); import wheel_backend as b; "
                "print(b.build_sdist(sys.argv[1]))" % os.path.join(ROOT, "mk"))
        r = subprocess.run([python(), "-c", code, tmp], capture_output=True, text=True, timeout=300)
        assert r.returncode == 0, r.stderr
        sdist = os.path.join(tmp, r.stdout.strip())
        with tarfile.open(sdist) as t:
            members = {m.name.split("/", 1)[1] for m in t.getmembers() if m.isfile()}
            t.extractall(tmp)
        # The tree, listed here on its own terms (not by the backend's own
        # list): every file under ROOT that .gitignore does not exclude
        # and, in a git checkout, that is not untracked; PKG-INFO and
        # MANIFEST besides.
        want = tree_files() | {"PKG-INFO", "MANIFEST"}
        assert len(want) > 100 and "Makefile" in want and "daemon/server.c" in want, sorted(want)
        assert members == want, (sorted(members - want), sorted(want - members))
        src = os.path.join(tmp, os.path.basename(sdist)[:-len(".tar.gz")])
        # The sdist's tree through the same Makefile, against the objects
        # built already (every source and header the build uses must be in
        # it, or make has no rule for it), gives the same wheel.
        out = os.path.join(tmp, "out")
        r = subprocess.run([python(), "-m", "pip", "wheel", "--no-build-isolation", "--no-index",
                            "--no-deps", "--no-cache-dir", "-w", out, src], capture_output=True,
                           text=True, timeout=1800, env=dict(os.environ, PTXCACHE_WHEEL_B=STATIC_B))
        assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
        again = os.path.join(out, os.path.basename(w))
        assert os.path.exists(again), os.listdir(out)
        with zipfile.ZipFile(w) as a, zipfile.ZipFile(again) as b:
            assert record_ok(a) == record_ok(b)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


# ---- a fresh virtual environment ---------------------------------------------------

def venv_files(venv):
    out = set()
    for root, dirs, files in os.walk(venv):
        for f in files + [d for d in dirs if os.path.islink(os.path.join(root, d))]:
            out.add(os.path.relpath(os.path.join(root, f), venv))
    return out


def make_venv(tmp):
    venv = os.path.join(tmp, "venv")
    r = subprocess.run([python(), "-m", "venv", venv], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    return venv


def pip(venv, *args):
    r = subprocess.run([os.path.join(venv, "bin", "pip"), "--disable-pip-version-check",
                        "--no-cache-dir"] + list(args), capture_output=True, text=True, timeout=300,
                       env={"PATH": "/usr/bin:/bin", "HOME": os.path.dirname(venv)})
    assert r.returncode == 0, r.stdout + r.stderr
    return r


def user_env(tmp, venv, **extra):
    """A user's session with nothing of ptxcache running: its own runtime
    and cache directories, a node socket nobody serves, the venv's bin/
    first on PATH, the stand-ins for PyTorch and Triton importable."""
    env = {"PATH": os.path.join(venv, "bin") + ":/usr/bin:/bin", "HOME": tmp,
           "XDG_RUNTIME_DIR": os.path.join(tmp, "run"), "XDG_CACHE_HOME": os.path.join(tmp, "cache"),
           "PTXCACHE_NODE_SOCKET": os.path.join(tmp, "node", "ptxcached.sock"),
           "PTXCACHE_IDLE_EXIT": str(IDLE_EXIT), "PTXCACHE_TORCH": "1", "PYTHONPATH": STUBS,
           "PYTHONDONTWRITEBYTECODE": "1", "LANG": "C.UTF-8"}
    env.update(extra)
    return env


def own_socket(tmp):
    return os.path.join(tmp, "run", "ptxcache", "ptxcached.sock")


def daemon_log(tmp):
    p = os.path.join(tmp, "cache", "ptxcache", "ptxcached.log")
    return open(p).read() if os.path.exists(p) else ""


def job(venv, env, *args):
    return subprocess.Popen([os.path.join(venv, "bin", "python"), JOBS] + list(args), env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def result(p, timeout=120):
    out, err = p.communicate(timeout=timeout)
    assert p.returncode == 0, (p.returncode, out, err)
    lines = [line for line in out.splitlines() if line.startswith("{")]
    assert lines, (out, err)
    return json.loads(lines[-1]), err


def status(venv, env):
    r = subprocess.run([os.path.join(venv, "bin", "python"), "-m", "ptxcache", "status", "--json",
                        "--no-import"], env=env, capture_output=True, text=True, timeout=60)
    return json.loads(r.stdout)


def daemons_of(venv):
    """Pids of ptxcached masters running from venv's bin/."""
    exe = os.path.realpath(os.path.join(venv, "bin", "ptxcached"))
    pids = []
    for p in os.listdir("/proc"):
        if not p.isdigit():
            continue
        try:
            if os.path.realpath("/proc/%s/exe" % p) != exe:
                continue
            with open("/proc/%s/cmdline" % p, "rb") as f:
                if b"--worker" in f.read().split(b"\0"):
                    continue
            with open("/proc/%s/stat" % p) as f:
                if f.read().rsplit(")", 1)[1].split()[0] == "Z":
                    continue        # exited, not yet reaped
        except OSError:
            continue
        pids.append(int(p))
    return pids


def wait_gone(venv, tmp, limit):
    deadline = time.time() + limit
    while daemons_of(venv) or os.path.exists(own_socket(tmp)):
        assert time.time() < deadline, ("the idle daemon did not exit", daemons_of(venv),
                                        daemon_log(tmp)[-2000:])
        time.sleep(0.1)


def llc_front(venv, env, tag, out):
    ir = os.path.join(os.path.dirname(out), tag + ".ll")
    with open(ir, "wb") as f:
        f.write(small_ir(tag))
    return subprocess.Popen([os.path.join(venv, "bin", "ptxcache"), "llc"] + TRITON_FLAGS +
                            [ir, "-o", out], env=dict(env, PTXCACHE_LLC="/bin/false"),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def test_wheel_in_a_fresh_venv_starts_the_users_daemon_which_serves_and_exits_idle():
    w = wheel()
    tmp = tempfile.mkdtemp(prefix="ptxcache-venv-")
    venv = None
    try:
        venv = make_venv(tmp)
        before = venv_files(venv)
        t0 = time.time()
        pip(venv, "install", "--no-index", w)
        install_s = time.time() - t0
        for p in ("ptxcached", "ptxcache"):
            assert os.access(os.path.join(venv, "bin", p), os.X_OK), p
        assert not [p for p in ("ptxas", "llc") if os.path.exists(os.path.join(venv, "bin", p))]
        env = user_env(tmp, venv)
        r = subprocess.run([os.path.join(venv, "bin", "python"), "-c",
                            "import ptxcache, sys; print(ptxcache.__file__); "
                            "print(any('/usr/lib/python3/dist-packages' in p for p in sys.path))"],
                           env=env, capture_output=True, text=True)
        assert r.stdout.startswith(venv) and r.stdout.split()[1] == "False", r
        assert status(venv, env)["daemon"]["in_use"] == "none"
        assert not os.path.exists(own_socket(tmp))

        # First run: no daemon anywhere; the job's first cache lookup
        # starts the user's own, and its kernel and graph are stored.
        marks = os.path.join(tmp, "marks")
        t0 = time.time()
        r1, err1 = result(job(venv, dict(env, TRITON_CACHE_DIR=os.path.join(tmp, "t1")),
                              "triton", "WHEELKEY", "k", marks))
        first_s = time.time() - t0
        assert r1["result"] == "compiled" and "WARNING" not in err1, (r1, err1)
        assert os.path.exists(own_socket(tmp)) and daemon_log(tmp).count("listening on") == 1
        f1, _ = result(job(venv, env, "fx", "wheelgraph", marks))
        assert f1["result"] == "compiled", f1
        # Second run, fresh processes, an empty Triton cache: served by it.
        t0 = time.time()
        r2, err2 = result(job(venv, dict(env, TRITON_CACHE_DIR=os.path.join(tmp, "t2")),
                              "triton", "WHEELKEY", "k", marks))
        second_s = time.time() - t0
        assert r2["result"] == "hit" and r2["files"] == r1["files"], (r2, err2)
        f2, _ = result(job(venv, env, "fx", "wheelgraph", marks))
        assert f2["result"] == "hit" and f2["data"] == "graph wheelgraph", f2
        assert len(os.listdir(marks)) == 2      # one compile of each
        s = status(venv, env)
        d = s["daemon"]
        assert d["in_use"] == "own" and d["started_by_client"] and d["same_version"], d
        assert d["log"].startswith(os.path.join(tmp, "cache")), d
        assert os.path.realpath("/proc/%d/exe" % d["pid"]) == os.path.realpath(
            os.path.join(venv, "bin", "ptxcached"))
        assert os.path.realpath(s["ptxas"]["front"]) == os.path.realpath(
            os.path.join(venv, "bin", "ptxcache")), s["ptxas"]
        st = json.loads(subprocess.run([os.path.join(venv, "bin", "ptxcache"), "stats", "--json"],
                                       env=env, capture_output=True, text=True).stdout)
        assert st["artifact_hits"] >= 2, st
        assert daemon_log(tmp).count("listening on") == 1

        # Idle: it exits, and takes its socket with it.
        wait_gone(venv, tmp, IDLE_EXIT + 15)
        assert "idle-exit" in daemon_log(tmp), daemon_log(tmp)[-2000:]

        # Eight clients at once, Python jobs and the C llc front: one daemon.
        marks8 = os.path.join(tmp, "marks8")
        procs = [job(venv, dict(env, TRITON_CACHE_DIR=os.path.join(tmp, "e%d" % i)), "triton",
                     "EIGHT", "k", marks8, "--sleep", "0.5") for i in range(4)]
        fronts = [llc_front(venv, env, "eight%d" % i, os.path.join(tmp, "eight%d.ptx" % i))
                  for i in range(4)]
        res = [result(p)[0]["result"] for p in procs]
        for i, p in enumerate(fronts):
            out, err = p.communicate(timeout=120)
            assert p.returncode == 0, err
            assert b".entry k_eight%d" % i in open(os.path.join(tmp, "eight%d.ptx" % i), "rb").read()
        assert sorted(res) == ["compiled", "hit", "hit", "hit"], res
        assert len(os.listdir(marks8)) == 1
        log = daemon_log(tmp)
        assert log.count("listening on") == 2, log[-3000:]
        assert "in use by another daemon" not in log and "another daemon is serving" not in log
        assert len(daemons_of(venv)) == 1, [open("/proc/%d/cmdline" % p, "rb").read()
                                            for p in daemons_of(venv)]
        st = json.loads(subprocess.run([os.path.join(venv, "bin", "ptxcache"), "stats", "--json"],
                                       env=env, capture_output=True, text=True).stdout)
        assert st["compiles"] >= 4, st
        wait_gone(venv, tmp, IDLE_EXIT + 15)

        # pip uninstall: the venv as it was; outside it, the cache alone
        # (and the runtime directory's lock file; the socket went with the
        # daemon).
        pip(venv, "uninstall", "-y", "ptxcache")
        after = venv_files(venv)
        assert after == before, (after - before, before - after)
        outside = {os.path.relpath(os.path.join(r, f), tmp) for r, _, fs in os.walk(tmp)
                   for f in fs if not os.path.join(r, f).startswith(venv + os.sep)}
        left = {p for p in outside if not p.startswith(("cache/ptxcache/", "t1/", "t2/", "e0/", "e1/",
                                                        "e2/", "e3/", "marks", "eight"))}
        assert left == {"run/ptxcache/autostart.lock"}, left
        print("wheel %.1f MB built in %.0f s; pip install %.1f s; first run (starts the daemon) "
              "%.2f s, second %.2f s" % (os.path.getsize(w) / 1e6, _cache.get("wheel_s", 0),
                                         install_s, first_s, second_s))
    finally:
        if venv:
            for pid in daemons_of(venv):
                os.kill(pid, 9)
        shutil.rmtree(tmp, ignore_errors=True)


def test_wheel_uses_the_node_service_where_one_answers():
    w = wheel()
    tmp = tempfile.mkdtemp(prefix="ptxcache-venv-")
    venv = None
    try:
        venv = make_venv(tmp)
        pip(venv, "install", "--no-index", w)
        with Daemon(workers=1) as node:
            env = user_env(tmp, venv, PTXCACHE_NODE_SOCKET=node.socket)
            marks = os.path.join(tmp, "marks")
            r1, _ = result(job(venv, dict(env, TRITON_CACHE_DIR=os.path.join(tmp, "t1")),
                               "triton", "NODEKEY", "k", marks))
            r2, _ = result(job(venv, dict(env, TRITON_CACHE_DIR=os.path.join(tmp, "t2")),
                               "triton", "NODEKEY", "k", marks))
            assert (r1["result"], r2["result"]) == ("compiled", "hit"), (r1, r2)
            p = llc_front(venv, env, "node", os.path.join(tmp, "node.ptx"))
            assert p.wait(timeout=120) == 0, p.communicate()
            s = node.stats()
            assert s["artifact_hits"] >= 1 and s["compiles"] >= 1, s
            d = status(venv, env)["daemon"]
            assert d["in_use"] == "node service" and d["socket"] == node.socket, d
            # Nothing of the user's own was started.
            assert not os.path.exists(own_socket(tmp)) and not daemon_log(tmp)
            assert not daemons_of(venv)
        # Switched off: no daemon anywhere, none started, a miss and a warning.
        env = user_env(tmp, venv, PTXCACHE_AUTOSTART="0")
        r3, err3 = result(job(venv, dict(env, TRITON_CACHE_DIR=os.path.join(tmp, "t3")),
                              "triton", "OFFKEY", "k", os.path.join(tmp, "m3")))
        assert r3["result"] == "compiled" and "PTXCACHE_AUTOSTART=0" in err3, err3
        assert not os.path.exists(own_socket(tmp)) and not daemons_of(venv)
        s = status(venv, env)
        assert s["daemon"]["in_use"] == "none" and "PTXCACHE_AUTOSTART=0" in s["next"][0], s
    finally:
        if venv:
            for pid in daemons_of(venv):
                os.kill(pid, 9)
        shutil.rmtree(tmp, ignore_errors=True)
