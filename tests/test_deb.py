# SPDX-License-Identifier: Apache-2.0
"""The Debian packages end to end, as an admin of a GPU node gets them:
`make deb`, `dpkg -i` on this machine, the installed files, the installed
daemon on a private socket compiling a kernel for the installed CLI and a
program linked against the installed library, the installed Python
package (import, status, its .pth hook), `systemd-analyze verify` on
the installed units (no systemd runs here), then `dpkg --purge` and
nothing left behind but the ptxcache user and group, which Debian policy
(9.2.2) keeps.

The package build runs the tests only it can run (debian/rules:
PACKAGE_TESTS, the C code as Debian compiles it, a tree that is no git
checkout), and must say they passed; this test skips itself there
(PTXCACHE_PACKAGE_BUILD), as it would otherwise build the package again
from inside its own build."""
import json
import os
import re
import shutil
import subprocess
import tempfile
import time

from harness import ROOT, SANITIZED, Skip, small_ir
from sysutil import tool

# tests/run.py: runs alone, after the other files.
SERIAL = "dpkg -i: the packages, their .pth hook and units installed on the whole machine"
# tests/run.py: left out of make check-asan.
NOT_UNDER_SANITIZERS = "the package is built with Debian's flags, not the sanitizers"

PACKAGES = ["ptxcache", "libptxcache0", "libptxcache-dev", "python3-ptxcache"]
# Where a package can leave files; searched for names with "ptxcache".
SYSTEM_DIRS = ["/etc", "/usr", "/lib", "/var", "/run", "/opt"]


def traces():
    """Every path under SYSTEM_DIRS whose name holds "ptxcache"."""
    found = set()
    for top in SYSTEM_DIRS:
        if not os.path.isdir(top) or os.path.islink(top):   # /lib: /usr/lib
            continue
        r = subprocess.run(["find", top, "-xdev", "-name", "*ptxcache*"],
                           capture_output=True, text=True)
        # /var/cache/man: man-db's cache of formatted pages, written when
        # systemd-analyze verify runs man to check Documentation=; man-db
        # expires it, the package never owned it.
        found.update(p for p in r.stdout.split("\n")
                     if p and not p.startswith(("/var/tmp/", "/var/cache/apt/", "/var/cache/man/")))
    return found


def dpkg(*args):
    """dpkg, waiting for its lock if another dpkg or apt holds it."""
    deadline = time.time() + 300
    while True:
        r = subprocess.run(["dpkg"] + list(args), capture_output=True, text=True, timeout=600,
                           env=dict(os.environ, DEBIAN_FRONTEND="noninteractive"))
        if r.returncode == 0 or "lock" not in r.stderr or time.time() > deadline:
            return r
        time.sleep(2)


def installed(pkg):
    r = subprocess.run(["dpkg-query", "-W", "-f=${db:Status-Status}", pkg],
                       capture_output=True, text=True)
    return r.returncode == 0 and r.stdout not in ("", "not-installed")


def run(args, **kw):
    kw.setdefault("timeout", 300)
    return subprocess.run(args, capture_output=True, text=True, **kw)


def test_deb_package_installs_serves_and_purges():
    if os.environ.get("PTXCACHE_PACKAGE_BUILD"):
        raise Skip("inside the package's own build")
    if SANITIZED:
        raise Skip("the package is built with the normal compiler; make test runs this")
    if os.geteuid() != 0:
        raise Skip("needs root to install a package")
    for p in PACKAGES:
        assert not installed(p), ("%s is installed on this machine already; this test installs "
                                  "and purges it: dpkg --purge it first" % p)
    before = traces()
    tmp = tempfile.mkdtemp(prefix="ptxcache-deb-")
    daemon = None
    try:
        # ---- build -------------------------------------------------------
        out = os.path.join(tmp, "deb")
        r = run(["make", "-s", "--no-print-directory", "-C", ROOT, "deb", "DEB_DIR=" + out],
                env={k: v for k, v in os.environ.items() if k != "DEB_BUILD_OPTIONS"}, timeout=1800)
        assert r.returncode == 0, (r.stdout + r.stderr)[-6000:]
        # Its own tests ran, and passed: tests/run.py's last line, with no
        # failure and no skip.
        ran = re.findall(r"^(\d+) passed, (\d+) failed, (\d+) skipped$", r.stdout, re.M)
        assert len(ran) == 1 and int(ran[0][0]) > 0 and ran[0][1:] == ("0", "0"), \
            (ran, r.stdout[-6000:])
        # make deb fails on a lintian error or unexplained warning; it runs
        # lintian last, so its verdict is in the output.
        assert not re.search(r"^[EW]: ", r.stdout + r.stderr, re.M), r.stdout + r.stderr
        debs = {}
        for f in os.listdir(out):
            m = re.match(r"^([a-z0-9-]+)_[^_]+_[a-z0-9]+\.deb$", f)
            if m:
                debs[m.group(1)] = os.path.join(out, f)
        for p in PACKAGES:
            assert p in debs, (p, sorted(debs))
        # Nothing beside the tree it was built in: a clone with no parent
        # directory of its own must work.
        assert not [f for f in os.listdir(os.path.dirname(ROOT)) if f.endswith(".deb")
                    and f.startswith("ptxcache")]

        fields = run(["dpkg-deb", "-f", debs["ptxcache"], "Depends", "Suggests"]).stdout
        assert "libsqlite3" in fields and "libevent" in fields, fields   # ${shlibs:Depends}
        assert "llvm" not in fields.lower(), fields     # LLVM is linked in
        assert re.search(r"^Suggests:.*cuda", fields, re.M), fields
        assert "libptxcache0 (= " in run(["dpkg-deb", "-f", debs["libptxcache-dev"],
                                          "Depends"]).stdout

        # ---- install -----------------------------------------------------
        r = dpkg("-i", *[debs[p] for p in PACKAGES])
        assert r.returncode == 0, r.stdout + r.stderr
        for p in PACKAGES:
            assert installed(p), p
        files = set()
        for p in PACKAGES:
            files.update(run(["dpkg", "-L", p]).stdout.split())
        multiarch = run(["dpkg-architecture", "-qDEB_HOST_MULTIARCH"]).stdout.strip()
        libdir = "/usr/lib/" + multiarch
        for want in ["/usr/bin/ptxcached", "/usr/bin/ptxcache", "/etc/ptxcache/ptxcached.conf",
                     "/lib/systemd/system/ptxcached.service", "/lib/systemd/system/ptxcached.socket",
                     "/usr/lib/sysusers.d/ptxcache.conf", "/usr/share/man/man8/ptxcached.8.gz",
                     "/usr/share/man/man1/ptxcache.1.gz", "/usr/share/man/man5/ptxcached.conf.5.gz",
                     "/usr/include/ptxcache.h", libdir + "/libptxcache.a",
                     libdir + "/libptxcache.so", libdir + "/libptxcache.so.0",
                     libdir + "/pkgconfig/ptxcache.pc", "/usr/lib/ptxcache/ptxas",
                     "/usr/lib/python3/dist-packages/ptxcache/client.py",
                     "/usr/lib/python3/dist-packages/ptxcache.pth"]:
            assert want in files and os.path.lexists(want), want
        # The library: a soname, and the links a loader and a linker use.
        assert os.readlink(libdir + "/libptxcache.so.0").startswith("libptxcache.so.0.")
        assert os.readlink(libdir + "/libptxcache.so") == "libptxcache.so.0"
        assert os.readlink("/usr/lib/ptxcache/ptxas") == "../../bin/ptxcache"
        fields = run(["dpkg-deb", "-f", debs["python3-ptxcache"], "Depends", "Architecture"]).stdout
        assert "python3-msgpack" in fields and "Architecture: all" in fields, fields
        dyn = run(["readelf", "-d", libdir + "/libptxcache.so.0"]).stdout
        assert "Library soname: [libptxcache.so.0]" in dyn, dyn
        needed = run(["readelf", "-d", "/usr/bin/ptxcached"]).stdout
        assert "NEEDED" in needed and "libLLVM" not in needed, needed
        # The configuration file is a conffile; the units are installed
        # the Debian way: the socket enabled, the service left to it.
        conff = run(["dpkg-query", "-W", "-f=${Conffiles}", "ptxcache"]).stdout
        assert "/etc/ptxcache/ptxcached.conf" in conff, conff
        assert os.path.islink("/etc/systemd/system/sockets.target.wants/ptxcached.socket")
        assert not os.path.lexists("/etc/systemd/system/multi-user.target.wants/ptxcached.service")
        # The postinst made the user and group the units name.
        assert run(["getent", "passwd", "ptxcache"]).returncode == 0
        assert run(["getent", "group", "ptxcache"]).returncode == 0

        # ---- the installed daemon, CLI and library ------------------------
        sock = os.path.join(tmp, "run", "ptxcached.sock")
        log = open(os.path.join(tmp, "daemon.log"), "wb")
        env = {k: v for k, v in os.environ.items() if not k.startswith("PTXCACHE_")}
        daemon = subprocess.Popen(["/usr/bin/ptxcached", "--socket", sock, "--cache-dir",
                                   os.path.join(tmp, "cache"), "--workers", "1"],
                                  stdout=log, stderr=log, env=env)
        deadline = time.time() + 60
        while run(["/usr/bin/ptxcache", "--socket", sock, "ping"], env=env).returncode != 0:
            assert daemon.poll() is None, open(os.path.join(tmp, "daemon.log")).read()
            assert time.time() < deadline, "the installed daemon did not answer"
            time.sleep(0.05)
        r = subprocess.run(["/usr/bin/ptxcache", "--socket", sock, "compile", "-"],
                           input=small_ir("debpkg"), capture_output=True, timeout=300, env=env)
        assert r.returncode == 0 and b".entry k_debpkg" in r.stdout, r.stderr
        # The daemon reads the installed conffile (an admin's edit, which
        # the purge below must take away as well).
        with open("/etc/ptxcache/ptxcached.conf", "a") as f:
            f.write("max-size = 1G\n")
        cfg = run(["/usr/bin/ptxcached", "--print-config"], env=env).stdout
        assert re.search(r"^max-size = 1073741824\t# /etc/ptxcache/ptxcached.conf", cfg, re.M), cfg
        # A program built with pkg-config against libptxcache-dev, run
        # against libptxcache0, talking to the installed daemon.
        src, exe = os.path.join(tmp, "ping.c"), os.path.join(tmp, "ping")
        with open(src, "w") as f:
            f.write('#include <ptxcache.h>\n#include <stdio.h>\nint main(int c, char **v) {\n'
                    '  char err[256];\n  ptxcache *pc = ptxcache_connect(v[1], 60000, err, sizeof err);\n'
                    '  if (!pc) { puts(err); return 3; }\n'
                    '  int r = ptxcache_ping(pc);\n  ptxcache_close(pc);\n'
                    '  puts(r == 0 ? "pong" : "no pong");\n  return r == 0 ? 0 : 1;\n}\n')
        flags = run(["pkg-config", "--cflags", "--libs", "ptxcache"]).stdout.split()
        assert "-lptxcache" in flags, flags
        r = run(["cc", "-o", exe, src] + flags)
        assert r.returncode == 0, r.stderr
        m = re.search(r"libptxcache\.so\.0 => (\S+)", run(["ldd", exe]).stdout)
        assert m and os.path.realpath(m.group(1)) == os.path.realpath(libdir + "/libptxcache.so.0")
        r = run([exe, sock])
        assert r.returncode == 0 and r.stdout == "pong\n", (r.returncode, r.stdout)
        # The Python package, from the installed files alone (no PYTHONPATH,
        # another directory): it imports, talks to the daemon, and its .pth
        # turns everything on for PTXCACHE_TORCH=1.
        py = dict(env, PTXCACHE_SOCKET=sock, HOME=tmp)
        py.pop("PYTHONPATH", None)
        r = run(["/usr/bin/python3", "-c", "import ptxcache, sys; "
                 "assert ptxcache.__file__.startswith('/usr/lib/python3/dist-packages/'); "
                 "ptxcache.Client().ping(); print(ptxcache.__version__)"], env=py, cwd="/")
        assert r.returncode == 0 and r.stdout.strip(), r.stderr
        r = run(["/usr/bin/python3", "-m", "ptxcache", "status", "--json", "--no-import"], env=py, cwd="/")
        assert r.returncode == 0, r.stdout + r.stderr
        st = json.loads(r.stdout)
        assert st["daemon"]["reachable"] and st["daemon"]["artifacts"], st["daemon"]
        assert st["package"]["pth_installed"] and st["package"]["msgpack"].startswith("msgpack"), st
        # (The hook turns the torch part on as the import of triton begins:
        # a stand-in's, an empty package in the working directory.)
        os.makedirs(os.path.join(tmp, "stand", "triton"))
        open(os.path.join(tmp, "stand", "triton", "__init__.py"), "w").close()
        r = run(["/usr/bin/python3", "-c", "import os, triton; print(os.environ.get('TRITON_CACHE_MANAGER'), "
                 "os.environ.get('TRITON_PTXAS_PATH'))"], env=dict(py, PTXCACHE_TORCH="1"),
                cwd=os.path.join(tmp, "stand"))
        assert r.stdout.split() == ["triton.runtime.cache:RemoteCacheManager",
                                    "/usr/lib/ptxcache/ptxas"], r.stdout + r.stderr
        daemon.terminate()
        assert daemon.wait(60) == 0, open(os.path.join(tmp, "daemon.log")).read()
        daemon = None
        log.close()

        # ---- the installed units ------------------------------------------
        units = ["/lib/systemd/system/ptxcached.socket", "/lib/systemd/system/ptxcached.service"]
        man = [] if shutil.which("man") else ["--man=no"]
        r = run([tool("systemd-analyze"), "verify"] + man + units, timeout=120)
        assert r.returncode == 0 and not r.stderr.strip(), r.stdout + r.stderr

        # ---- purge -------------------------------------------------------
        # What systemd would have made for the service (CacheDirectory=,
        # StateDirectory=): the purge takes it too.
        for d in ("/var/cache/ptxcache", "/var/lib/ptxcache"):
            os.makedirs(d, exist_ok=True)
            with open(os.path.join(d, "made-by-the-service"), "w") as f:
                f.write("x")
        r = dpkg("--purge", *PACKAGES)
        assert r.returncode == 0, r.stdout + r.stderr
        for p in PACKAGES:
            assert not installed(p), p
        left = traces() - before
        assert not left, "left behind after the purge: %s" % sorted(left)
        # Debian keeps the system user and group a package made.
        assert run(["getent", "passwd", "ptxcache"]).returncode == 0
    finally:
        if daemon and daemon.poll() is None:
            daemon.kill()
            daemon.wait()
        installed_now = [p for p in PACKAGES if installed(p)]
        if installed_now:
            dpkg("--purge", *installed_now)
        shutil.rmtree(tmp, ignore_errors=True)
