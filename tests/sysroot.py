# SPDX-License-Identifier: Apache-2.0
"""Other systems on this machine, for the tests that run the project's
programs where Debian 12 is not (tests/test_oldsystem.py):

- ``Root(base)``: a copy of the directory base run as a system of its
  own (the copy, so that every test starts from the same system and
  leaves base as it was). A holder process in a mount and pid namespace
  of its own (``unshare``), with /proc of that namespace and this
  machine's /dev mounted in the copy; ``run()`` (or ``prefix``, for a
  command line of one's own) enters both namespaces and chroots there, so
  a daemon one command starts is still there for the next; leaving kills
  the holder, and with it every process left in the namespace, the
  mounts go with the namespace, and the copy is removed.
- ``debian11()``: Debian 11 (bullseye, glibc 2.31, Python 3.9), made once
  by mk/testroot.sh under ``ROOTS`` and kept.
- ``aarch64()``: what an aarch64 program linked against glibc needs to
  run under qemu-user: Debian 11's arm64 C library (the build's own
  sysroot, mk/sysroot.sh) as the root, and qemu-aarch64-static
  registered with binfmt_misc, as the qemu-user-static package does, so
  that the daemon's exec of its own binary for a worker runs it too.

Each needs root (unshare, chroot, debootstrap, binfmt_misc).
"""
import os
import shutil
import subprocess
import tempfile

from harness import ROOT, Skip

ROOTS = os.environ.get("PTXCACHE_ROOTS", os.path.join(ROOT, "build", "roots"))
QEMU_BINFMT = "/usr/lib/binfmt.d/qemu-aarch64.conf"
BINFMT = "/proc/sys/fs/binfmt_misc"


def need_root():
    if os.geteuid() != 0:
        raise Skip("needs root: unshare, chroot and debootstrap (CI runs as root)")


class Root:
    def __init__(self, base):
        need_root()
        base = os.path.realpath(base)
        self.path = tempfile.mkdtemp(prefix=os.path.basename(base) + ".run-", dir=os.path.dirname(base))
        subprocess.run(["cp", "-a", base + "/.", self.path], check=True)
        self.scratch = tempfile.mkdtemp(prefix="ptxcache-", dir=os.path.join(self.path, "tmp"))
        self.inside = "/tmp/" + os.path.basename(self.scratch)   # the scratch, seen inside
        os.chmod(self.scratch, 0o755)
        self.holder = subprocess.Popen(
            ["unshare", "--mount", "--pid", "--fork", "--kill-child", "sh", "-c",
             'mount -t proc proc "$1/proc" && mount --rbind /dev "$1/dev" && echo up && exec sleep 86400',
             "sh", self.path], stdout=subprocess.PIPE, text=True)
        if self.holder.stdout.readline().strip() != "up":
            self.holder.kill()
            raise AssertionError("cannot set up the namespaces for %s" % self.path)
        # The holder is unshare's child, pid 1 of the namespace.
        kids = subprocess.run(["pgrep", "-P", str(self.holder.pid)], capture_output=True,
                              text=True).stdout.split()
        assert len(kids) == 1, kids
        self.pid = int(kids[0])
        self.prefix = [shutil.which("nsenter"), "-t", str(self.pid), "-m", "-p", "--",
                       shutil.which("chroot"), self.path]

    def host_path(self, inside):
        """The path on this machine of a path inside the root."""
        return os.path.join(self.path, inside.lstrip("/"))

    def run(self, argv, env=None, timeout=300, check=True, input=None, popen=None):
        """argv in the root, with env alone as its environment; popen: a
        file for its output, and the process is returned running."""
        cmd = self.prefix + list(argv)
        env = dict(env or {"PATH": "/usr/bin:/bin"})
        if popen:
            return subprocess.Popen(cmd, stdout=popen, stderr=popen, env=env)
        r = subprocess.run(cmd, capture_output=True, timeout=timeout, input=input, env=env)
        if check and r.returncode != 0:
            raise AssertionError("%s in %s failed (%d):\n%s%s" % (
                " ".join(argv), self.path, r.returncode, r.stdout.decode(errors="replace")[-3000:],
                r.stderr.decode(errors="replace")[-3000:]))
        return r

    def processes(self):
        """Command lines of the processes running in the root's namespace,
        the holder left out."""
        r = subprocess.run(["nsenter", "-t", str(self.pid), "-m", "--", "sh", "-c",
                            'cd "$1/proc" && for p in [0-9]*; do [ $p = 1 ] || '
                            "tr '\\0' ' ' < $p/cmdline 2>/dev/null; echo; done", "sh", self.path],
                           capture_output=True, text=True)
        return [line.strip() for line in r.stdout.splitlines() if line.strip()]

    def close(self):
        self.holder.kill()
        self.holder.wait()
        shutil.rmtree(self.path, ignore_errors=True)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def debian11():
    """The Debian 11 root's path, made on first use (a few minutes)."""
    need_root()
    path = os.path.join(ROOTS, "bullseye-x86_64")
    r = subprocess.run([os.path.join(ROOT, "mk", "testroot.sh"), path], capture_output=True,
                       text=True, timeout=1800)
    assert r.returncode == 0, r.stdout + r.stderr
    return path


def aarch64():
    """A root for aarch64 programs under qemu-user: Debian 11's arm64 C
    library with a /tmp, /proc, /dev and /usr/bin of its own."""
    need_root()
    if not os.path.exists(QEMU_BINFMT):
        raise AssertionError("no %s: mk/deps.sh installs qemu-user-static" % QEMU_BINFMT)
    if not os.path.exists(os.path.join(BINFMT, "register")):
        subprocess.run(["mount", "-t", "binfmt_misc", "binfmt_misc", BINFMT], check=True)
    if not os.path.exists(os.path.join(BINFMT, "qemu-aarch64")):
        with open(QEMU_BINFMT, "rb") as f, open(os.path.join(BINFMT, "register"), "wb") as reg:
            reg.write(f.read().strip())
    glibc = os.path.join(ROOTS, "sysroot-aarch64", "glibc", "root")
    assert os.path.exists(os.path.join(glibc, "lib", "ld-linux-aarch64.so.1")), \
        "no aarch64 sysroot at %s: make STATIC=1 ARCH=aarch64 makes it" % glibc
    path = os.path.join(ROOTS, "run-aarch64")
    if not os.path.exists(os.path.join(path, ".done")):
        shutil.rmtree(path, ignore_errors=True)
        shutil.copytree(glibc, path, symlinks=True)
        for d in ("tmp", "proc", "dev", "usr/bin", "etc"):
            os.makedirs(os.path.join(path, d), exist_ok=True)
        os.chmod(os.path.join(path, "tmp"), 0o1777)
        open(os.path.join(path, ".done"), "w").close()
    return path
