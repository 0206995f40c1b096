# SPDX-License-Identifier: Apache-2.0
"""The node tarball (`make dist`) end to end, as an admin of a node that is
not Debian 12 gets it: the archive built twice, byte for byte the same,
its members (sorted, owner 0, one mtime, stripped static programs that
need glibc alone), then `install.sh` into a DESTDIR: the tree, its lines,
an admin's config kept on a second run; then the installed service's own
`ExecStart=` line started with what systemd would give it
($RUNTIME_DIRECTORY, $CACHE_DIRECTORY) pointed at temp dirs, answering the
installed `ptxcache ping` and compiling a corpus kernel to the bytes a
daemon of the build tree gives.

`install_and_serve(root, prefix)` is the same install and run inside any
root file system: `prefix` is the command prefix that runs a program
there (`["chroot", root]`), and the install is then a real one (no
DESTDIR: the `ptxcache` user is created, and the daemon runs as it);
here it runs in Debian 11 (tests/sysroot.py's root: useradd, glibc 2.31)
and in this machine's own root under an overlay whose writes go to a
tmpfs (systemd-sysusers, and systemd-analyze verify of the installed
units). Skipped under make check-asan (the tarball holds the static
build) and inside the Debian package's build; the tests that need root
skip without it. About 90 s in all here, most of it the archives' strip
and xz and the copy of the Debian 11 root (the static builds are
incremental, in build-static/ and build-static-aarch64/; the root is made
once)."""
import atexit
import hashlib
import os
import re
import shlex
import shutil
import signal
import subprocess
import tarfile
import tempfile
import time

from harness import ROOT, SANITIZED, TRITON_FLAGS, Daemon, Skip, llc, triton_kernels

# tests/run.py: one after another with the other files of this group (they build build-static/).
GROUP = "static"
# tests/run.py: left out of make check-asan.
NOT_UNDER_SANITIZERS = "the tarball holds the static programs"

VERSION = re.search(r"^VERSION\s*:=\s*(\S+)", open(os.path.join(ROOT, "Makefile")).read(),
                    re.M).group(1)
ARCH = os.uname().machine
NAME = "ptxcache-%s-linux-%s" % (VERSION, ARCH)
GLIBC_LIBS = {"libc.so.6", "libm.so.6", "libdl.so.2", "librt.so.1", "libpthread.so.0",
              "ld-linux-x86-64.so.2", "ld-linux-aarch64.so.1"}
# What install.sh puts where, under PREFIX (and /etc for the config).
INSTALLED = ["bin/ptxcached", "bin/ptxcache", "lib/ptxcache/ptxas",
             "lib/systemd/system/ptxcached.service", "lib/systemd/system/ptxcached.socket",
             "lib/sysusers.d/ptxcache.conf", "share/man/man1/ptxcache.1",
             "share/man/man5/ptxcached.conf.5", "share/man/man8/ptxcached.8"]
# The compile every installed daemon is asked for, and its flags.
COMPILE = ["compile", "--arch", "sm_90a", "--ptx-isa", "90", "-O3", "-"]
_cache = {}


def need_dist_context():
    if SANITIZED:
        raise Skip("the tarball holds the static build, not the sanitized one: make test runs this")
    if os.environ.get("PTXCACHE_PACKAGE_BUILD"):
        raise Skip("inside the Debian package's build: the tarball is another package of the "
                   "tree (make dist; CI's lone clone runs this)")


def make_dist(out, *more):
    """make dist into out (xz at its fastest: the level is not what is tested)."""
    r = subprocess.run(["make", "-s", "--no-print-directory", "-C", ROOT, "dist", "DIST_DIR=" + out,
                        "DIST_XZ=-T2 -0"] + list(more),
                       capture_output=True, text=True, timeout=1800)
    return r


def tarball():
    """The tarball, built once per run (twice the first time: the same bytes)."""
    need_dist_context()
    if "tarball" not in _cache:
        d = tempfile.mkdtemp(prefix="ptxcache-dist-")
        atexit.register(shutil.rmtree, d, True)
        paths = []
        for sub in ("a", "b"):
            r = make_dist(os.path.join(d, sub))
            assert r.returncode == 0, (r.stdout + r.stderr)[-4000:]
            paths.append(os.path.join(d, sub, NAME + ".tar.xz"))
            assert os.path.exists(paths[-1]), os.listdir(os.path.join(d, sub))
        digests = [hashlib.sha256(open(p, "rb").read()).hexdigest() for p in paths]
        assert digests[0] == digests[1], "make dist twice gave two archives: %s" % digests
        _cache["tarball"] = paths[0]
        _cache["dir"] = d
    return _cache["tarball"]


def expected_compile():
    """A corpus kernel and its PTX from a daemon of the build tree (and llc's)."""
    if "want" not in _cache:
        k = triton_kernels()[0]
        ir = open(k, "rb").read()
        with Daemon(workers=1) as d:
            want = d.cli(*COMPILE, input=ir).stdout
        assert want == llc(TRITON_FLAGS + [k, "-o", "-"]).stdout, k
        _cache["want"] = (ir, want)
    return _cache["want"]


class Root:
    """A root file system and how programs run in it: with a prefix
    (["chroot", root]) a program sees the root's own paths; without one,
    it runs here and every path is the root's directory plus the path."""

    def __init__(self, root, prefix=()):
        self.root = root
        self.prefix = list(prefix)

    def host(self, path):
        """Where a path of the root is, seen from here."""
        return os.path.join(self.root, path.lstrip("/"))

    def inside(self, path):
        """The same path as a program run through the prefix sees it."""
        return path if self.prefix else self.host(path)

    def cmd(self, argv):
        return self.prefix + [self.inside(argv[0])] + list(argv[1:])


def unpack(tar, dest):
    with tarfile.open(tar) as t:
        t.extractall(dest)
    return os.path.join(dest, NAME)


def run_install(rt, tar, env, prefix_dir="/usr/local"):
    """install.sh of the tarball through rt; its stdout lines."""
    stage = "/tmp/ptxcache-dist-install"
    shutil.rmtree(rt.host(stage), ignore_errors=True)
    os.makedirs(rt.host(stage))
    top = unpack(tar, rt.host(stage))
    script = os.path.join(stage, NAME, "install.sh")
    assert os.path.exists(os.path.join(top, "install.sh"))
    e = dict(os.environ, PREFIX=prefix_dir, **env)
    r = subprocess.run(rt.prefix + ["/bin/sh", rt.inside(script)], capture_output=True, text=True,
                       timeout=120, env=e)
    assert r.returncode == 0, r.stdout + r.stderr
    shutil.rmtree(rt.host(stage), ignore_errors=True)
    return r.stdout.splitlines()


def serve_installed(rt, prefix_dir="/usr/local", as_user=None):
    """The installed service's ExecStart= line, run through rt with the
    directories systemd would give it redirected to temp dirs of the root,
    then the installed CLI's ping and a compile of a corpus kernel, which
    must be the bytes of a daemon of the build tree. as_user: run both as
    the unit's User= and Group= (the prefix then runs chroot, and its
    --userspec goes after it)."""
    ir, want = expected_compile()
    unit = open(rt.host(prefix_dir + "/lib/systemd/system/ptxcached.service")).read()
    m = re.search(r"^ExecStart=(.+)$", unit, re.M)
    assert m, unit
    argv = shlex.split(m.group(1))
    assert argv[0] == prefix_dir + "/bin/ptxcached", argv
    if as_user:
        user = re.search(r"^User=(\S+)$", unit, re.M).group(1)
        group = re.search(r"^Group=(\S+)$", unit, re.M).group(1)
        at = [i for i, a in enumerate(rt.prefix) if os.path.basename(a) == "chroot"]
        assert at, "as_user needs a prefix that chroots: %s" % rt.prefix
        rt = Root(rt.root, rt.prefix[:at[-1] + 1] + ["--userspec=%s:%s" % (user, group)] +
                  rt.prefix[at[-1] + 1:])
    base = "/tmp/ptxcache-dist-run"
    shutil.rmtree(rt.host(base), ignore_errors=True)
    os.makedirs(rt.host(base))
    os.chmod(rt.host(base), 0o777)     # the service's user, where the prefix runs as it
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PTXCACHE_", "XDG_"))}
    env.update(RUNTIME_DIRECTORY=rt.inside(base + "/run"), CACHE_DIRECTORY=rt.inside(base + "/cache"),
               PTXCACHE_CONFIG=rt.inside("/etc/ptxcache/ptxcached.conf"), PTXCACHE_WORKERS="1",
               PTXCACHE_AUTOSTART="0")
    sock = rt.inside(base + "/run/ptxcached.sock")
    cli = rt.cmd([prefix_dir + "/bin/ptxcache"]) + ["--socket", sock]
    log = open(rt.host(base + "-daemon.log"), "wb")
    daemon = subprocess.Popen(rt.cmd(argv), stdout=log, stderr=log, env=env)
    try:
        deadline = time.time() + 60
        while True:
            r = subprocess.run(cli + ["ping"], capture_output=True, timeout=30, env=env)
            if r.returncode == 0:
                break
            assert daemon.poll() is None, open(rt.host(base + "-daemon.log")).read()
            assert time.time() < deadline, "the installed daemon did not answer: %r" % r.stderr
            time.sleep(0.05)
        assert b"ptxcached " + VERSION.encode() in r.stdout, r.stdout
        r = subprocess.run(cli + COMPILE, input=ir, capture_output=True, timeout=300, env=env)
        assert r.returncode == 0, r.stderr
        assert r.stdout == want, "the installed daemon's PTX differs from the build tree's"
        # It was the service's directories it used, as the service's user.
        db = rt.host(base + "/cache/cache.db")
        assert os.path.exists(db), os.listdir(rt.host(base + "/cache"))
        if as_user:
            with open(rt.host("/etc/passwd")) as f:
                uid = [l.split(":")[2] for l in f if l.startswith(user + ":")]
            assert uid and os.stat(db).st_uid == int(uid[0]), (uid, os.stat(db).st_uid)
        # SIGTERM to the daemon itself (a prefix may fork: nsenter -p), and
        # the prefix ends with its status.
        os.kill(master_of(daemon.pid), signal.SIGTERM)
        assert daemon.wait(60) == 0, open(rt.host(base + "-daemon.log")).read()
    finally:
        if daemon.poll() is None:
            daemon.kill()
            daemon.wait()
        log.close()
        shutil.rmtree(rt.host(base), ignore_errors=True)


def master_of(pid):
    """The shallowest process named ptxcached from pid down (pid itself,
    where the prefix execs; its child, where the prefix forks)."""
    level = [pid]
    for _ in range(4):
        for p in level:
            try:
                with open("/proc/%d/comm" % p) as f:
                    if f.read().strip() == "ptxcached":
                        return p
            except OSError:
                pass
        r = subprocess.run(["pgrep", "-P", ",".join(map(str, level))], capture_output=True, text=True)
        level = [int(x) for x in r.stdout.split()]
    raise AssertionError("no ptxcached under pid %d" % pid)


def install_and_serve(root, prefix, as_user=True):
    """The tarball installed for real inside root (install.sh through
    prefix, e.g. ["chroot", root], or a tests/sysroot.py Root's; run as
    root it creates the ptxcache user), then served from there, as that
    user (as_user; the prefix then runs chroot); install.sh's lines. The
    root needs /proc mounted (the daemon execs its workers through
    /proc/self/exe) and /dev."""
    rt = Root(root, prefix)
    lines = run_install(rt, tarball(), {"DESTDIR": ""})
    serve_installed(rt, as_user=as_user)
    return lines


def test_dist_tarball_is_reproducible_and_holds_the_node_install():
    tar = tarball()
    with tarfile.open(tar) as t:
        members = t.getmembers()
    names = [m.name for m in members]
    assert names == sorted(names), names
    assert len({m.mtime for m in members}) == 1, {m.name: m.mtime for m in members}
    assert all(m.uid == 0 and m.gid == 0 for m in members), [(m.name, m.uid) for m in members]
    want = {NAME + "/" + p for p in [
        "install.sh", "LICENSE", "bin/ptxcached", "bin/ptxcache", "systemd/ptxcached.service.in",
        "systemd/ptxcached.socket", "systemd/ptxcache.sysusers", "systemd/ptxcached.conf",
        "man/ptxcache.1", "man/ptxcached.conf.5", "man/ptxcached.8"]}
    files = {m.name for m in members if m.isfile()}
    assert files == want, files ^ want
    modes = {m.name: m.mode for m in members}
    assert modes[NAME + "/install.sh"] == 0o755 and modes[NAME + "/bin/ptxcached"] == 0o755
    top = unpack(tar, _cache["dir"])
    for p in ("ptxcached", "ptxcache"):
        path = os.path.join(top, "bin", p)
        sect = subprocess.run(["readelf", "-S", path], capture_output=True, text=True).stdout
        assert ".symtab" not in sect, "%s is not stripped" % p
        dyn = subprocess.run(["objdump", "-p", path], capture_output=True, text=True).stdout
        needed = set(re.findall(r"^\s*NEEDED\s+(\S+)", dyn, re.M))
        assert needed and needed <= GLIBC_LIBS, needed
        r = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=30)
        assert r.returncode == 0 and VERSION in r.stdout, r.stdout + r.stderr
    # The sample config is the tree's, every setting at its default.
    assert open(os.path.join(top, "systemd", "ptxcached.conf")).read() == \
        open(os.path.join(ROOT, "systemd", "ptxcached.conf")).read()


def test_dist_for_another_arch_takes_its_programs_and_checks_them():
    """DIST_BUILD=0 (programs built elsewhere, e.g. the other architecture's)
    takes them from STATIC_B as they are: missing, make dist says where
    they go; of the wrong machine, it refuses them."""
    need_dist_context()
    other = "aarch64" if ARCH == "x86_64" else "x86_64"
    with tempfile.TemporaryDirectory() as t:
        r = make_dist(os.path.join(t, "out"), "ARCH=" + other, "DIST_BUILD=0",
                      "STATIC_B=" + os.path.join(t, "none"))
        assert r.returncode != 0 and "build the %s programs there first" % other in r.stderr, r.stderr
        wrong = os.path.join(t, "wrong")
        os.makedirs(wrong)
        for p in ("ptxcached", "ptxcache"):
            shutil.copy("/bin/true", os.path.join(wrong, p))
        r = make_dist(os.path.join(t, "out"), "ARCH=" + other, "DIST_BUILD=0", "STATIC_B=" + wrong)
        assert r.returncode != 0 and "is not an %s program" % other in r.stderr, r.stderr
        assert not os.path.exists(os.path.join(t, "out", "ptxcache-%s-linux-%s.tar.xz" % (VERSION, other)))


def test_dist_installs_into_a_destdir_and_its_execstart_serves():
    tar = tarball()
    with tempfile.TemporaryDirectory() as dest:
        rt = Root(dest)
        lines = run_install(rt, tar, {"DESTDIR": dest}, "/usr/local")
        for p in INSTALLED:
            assert os.path.lexists(rt.host("/usr/local/" + p)), p
            assert any(l.endswith(dest + "/usr/local/" + p) or (dest + "/usr/local/" + p + " ") in l
                       for l in lines), (p, lines)
        assert os.readlink(rt.host("/usr/local/lib/ptxcache/ptxas")) == "../../bin/ptxcache"
        conf = rt.host("/etc/ptxcache/ptxcached.conf")
        assert open(conf).read() == open(os.path.join(ROOT, "systemd", "ptxcached.conf")).read()
        assert any("no user created (DESTDIR is set)" in l for l in lines), lines
        unit = open(rt.host("/usr/local/lib/systemd/system/ptxcached.service")).read()
        assert "@BINDIR@" not in unit and "ExecStart=/usr/local/bin/ptxcached\n" in unit, unit
        assert os.stat(rt.host("/usr/local/bin/ptxcached")).st_mode & 0o777 == 0o755
        # An admin's config survives a second install (an upgrade), and
        # the daemon started below reads it.
        with open(conf, "a") as f:
            f.write("max-size = 3G\n")
        lines = run_install(rt, tar, {"DESTDIR": dest}, "/usr/local")
        assert any(l.startswith("install.sh: kept " + conf) for l in lines), lines
        assert open(conf).read().endswith("max-size = 3G\n")
        cfg = subprocess.run([rt.host("/usr/local/bin/ptxcached"), "--config", conf, "--print-config"],
                             capture_output=True, text=True, timeout=30).stdout
        assert re.search(r"^max-size = 3221225472\t# " + re.escape(conf), cfg, re.M), cfg
        serve_installed(rt, "/usr/local")
        # Another PREFIX: the unit names the programs there.
        run_install(rt, tar, {"DESTDIR": dest}, "/opt/ptxcache")
        unit = open(rt.host("/opt/ptxcache/lib/systemd/system/ptxcached.service")).read()
        assert "ExecStart=/opt/ptxcache/bin/ptxcached\n" in unit, unit
        r = subprocess.run(["/bin/sh", unpack(tar, dest) + "/install.sh"], capture_output=True,
                           text=True, env=dict(os.environ, PREFIX="relative", DESTDIR=dest))
        assert r.returncode == 2 and "PREFIX must be an absolute path" in r.stderr, r.stderr


def test_dist_install_as_root_creates_the_service_user():
    """install.sh as root with no DESTDIR creates the ptxcache user and
    group, here with systemd-sysusers, and says so; a second run finds it.
    It runs in a mount namespace of its own over a copy of /etc (without
    any ptxcache user of this machine's), so this machine's are not touched."""
    tar = tarball()
    if os.geteuid() != 0:
        raise Skip("needs root: install.sh creates the service user only as root")
    if not shutil.which("unshare") or not shutil.which("systemd-sysusers"):
        raise Skip("needs unshare (util-linux) and systemd-sysusers")
    host_passwd = open("/etc/passwd").read()
    with tempfile.TemporaryDirectory() as t:
        top = unpack(tar, t)
        etc = os.path.join(t, "etc")
        shutil.copytree("/etc", etc, symlinks=True, ignore_dangling_symlinks=True)
        for f in ("passwd", "group", "shadow", "gshadow"):
            p = os.path.join(etc, f)
            if os.path.exists(p):
                kept = [l for l in open(p) if not l.startswith("ptxcache:")]
                with open(p, "w") as out:
                    out.writelines(kept)
        script = ("mount --make-rprivate / && mount --bind %s /etc && "
                  "PREFIX=%s/usr sh %s/install.sh && echo --- && PREFIX=%s/usr sh %s/install.sh"
                  % (shlex.quote(etc), t, top, t, top))
        env = {k: v for k, v in os.environ.items() if k not in ("DESTDIR", "PREFIX")}
        r = subprocess.run(["unshare", "--mount", "sh", "-c", script], capture_output=True,
                           text=True, timeout=120, env=env)
        assert r.returncode == 0, r.stdout + r.stderr
        first, second = r.stdout.split("---\n")
        assert "install.sh: created user and group ptxcache with systemd-sysusers\n" in first, first
        assert "install.sh: user ptxcache exists\n" in second, second
        assert any(l.startswith("ptxcache:") for l in open(os.path.join(etc, "passwd"))), "no user"
        assert any(l.startswith("ptxcache:") for l in open(os.path.join(etc, "group"))), "no group"
        assert os.path.exists(os.path.join(etc, "ptxcache", "ptxcached.conf"))
        assert open("/etc/passwd").read() == host_passwd, "this machine's /etc/passwd changed"


def test_dist_installs_in_another_root_and_serves_as_its_user():
    """install_and_serve() through a chroot, as a root file system of
    another distribution is used: here this machine's own, under an
    overlay whose writes go to a tmpfs (so nothing here changes), with
    /proc and /dev mounted in it; the daemon runs as the user the
    install made (or found), and systemd-analyze verify reads the
    installed units there."""
    tarball()
    if os.geteuid() != 0:
        raise Skip("needs root: chroot and mount")
    t = tempfile.mkdtemp(prefix="ptxcache-dist-root-")
    upper, merged = os.path.join(t, "rw"), os.path.join(t, "root")
    os.makedirs(upper)
    os.makedirs(merged)
    mounted = []

    def mount(*args):
        r = subprocess.run(["mount"] + list(args), capture_output=True, text=True)
        assert r.returncode == 0, (args, r.stderr)
        mounted.append(args[-1])

    try:
        mount("-t", "tmpfs", "tmpfs", upper)
        os.makedirs(upper + "/u")
        os.makedirs(upper + "/w")
        mount("-t", "overlay", "overlay", "-o",
              "lowerdir=/,upperdir=%s/u,workdir=%s/w" % (upper, upper), merged)
        mount("-t", "proc", "proc", merged + "/proc")
        mount("--bind", "/dev", merged + "/dev")
        lines = install_and_serve(merged, ["chroot", merged])
        assert any(l.startswith("install.sh: installed /usr/local/bin/ptxcached") for l in lines), lines
        assert any("ptxcache with systemd-sysusers" in l or l == "install.sh: user ptxcache exists"
                   for l in lines), lines
        assert any(l.startswith("install.sh: next: systemctl daemon-reload") for l in lines), lines
        # The installed units, as systemd reads them there (no systemd runs here).
        units = ["/usr/local/lib/systemd/system/ptxcached.socket",
                 "/usr/local/lib/systemd/system/ptxcached.service"]
        r = subprocess.run(["chroot", merged, "systemd-analyze", "verify", "--man=no"] + units,
                           capture_output=True, text=True, timeout=120)
        assert r.returncode == 0 and not r.stderr.strip(), r.stdout + r.stderr
    finally:
        for m in reversed(mounted):
            subprocess.run(["umount", m], capture_output=True)
        with open("/proc/self/mounts") as f:
            left = [l.split()[1] for l in f if l.split()[1].startswith(t)]
        # Never remove a tree that still has this machine's /dev or / under it.
        assert not left, "still mounted: %s (left in place)" % left
        shutil.rmtree(t, ignore_errors=True)


def test_dist_installs_and_serves_on_debian_11():
    """The tarball on a system that is not Debian 12: Debian 11 (glibc
    2.31, no systemd in its minbase), a copy of tests/sysroot.py's root:
    install.sh creates the user with useradd there, and the installed
    unit's ExecStart= serves ping and the compile as that user."""
    tarball()
    import sysroot
    with sysroot.Root(sysroot.debian11()) as r:
        lines = install_and_serve(r.path, r.prefix)
        assert "install.sh: created user and group ptxcache with useradd" in lines, lines
        with open(r.host_path("/etc/os-release")) as f:
            assert 'VERSION_ID="11"' in f.read()


def test_dist_for_aarch64_holds_the_cross_built_programs():
    """make dist ARCH=aarch64 on x86_64: the cross build's programs
    (build-static-aarch64/, shared with the aarch64 wheel), stripped with
    the cross binutils, of ELF machine AArch64, needing glibc alone; the
    rest of the archive as for x86_64. (tests/test_oldsystem.py runs the
    same programs under qemu-user.)"""
    need_dist_context()
    if ARCH != "x86_64":
        raise Skip("the cross build is x86_64's (make dist ARCH=aarch64)")
    with tempfile.TemporaryDirectory() as t:
        r = make_dist(t, "ARCH=aarch64")
        assert r.returncode == 0, (r.stdout + r.stderr)[-4000:]
        name = "ptxcache-%s-linux-aarch64" % VERSION
        with tarfile.open(os.path.join(t, name + ".tar.xz")) as tf:
            names = sorted(m.name for m in tf.getmembers())
            tf.extractall(t)
        with tarfile.open(tarball()) as tf:
            assert names == sorted(m.name.replace(NAME, name) for m in tf.getmembers())
        for p in ("ptxcached", "ptxcache"):
            path = os.path.join(t, name, "bin", p)
            hdr = subprocess.run(["readelf", "-h", "-S", "-d", path], capture_output=True, text=True).stdout
            assert re.search(r"Machine:\s+AArch64", hdr), hdr[:500]
            assert ".symtab" not in hdr, "%s is not stripped" % p
            needed = set(re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]", hdr))
            assert needed and needed <= GLIBC_LIBS, needed
