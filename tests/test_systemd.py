# SPDX-License-Identifier: Apache-2.0
"""systemd integration without a running systemd: the daemon under
systemd-socket-activate (socket passed in, READY/STOPPING through a
NOTIFY_SOCKET the test binds), the units through systemd-analyze (verify,
security exposure), and `make install` into a DESTDIR."""
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time

from harness import CLI, DAEMON, ROOT, Skip
from sysutil import cli_as, probe_as, small_ir, tool

ERROR, PONG = 0xff, 0x82
UNIT_TEMPLATE = os.path.join(ROOT, "systemd", "ptxcached.service.in")


class Activated:
    """ptxcached exec'd by systemd-socket-activate on a private socket, with
    a NOTIFY_SOCKET of our own. The daemon starts at the first connection."""

    def __init__(self, before_start=None, workers=1):
        self.tmp = tempfile.mkdtemp(prefix="ptxcache-sd-")
        os.chmod(self.tmp, 0o755)
        self.socket = os.path.join(self.tmp, "ptxcached.sock")
        self.notify_path = os.path.join(self.tmp, "notify")
        self.notify = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.notify.bind(self.notify_path)
        self.notify.settimeout(60)
        self.own_socket = os.path.join(self.tmp, "own", "ptxcached.sock")
        self.log_path = os.path.join(self.tmp, "daemon.log")
        self.log = open(self.log_path, "wb")
        self.proc = subprocess.Popen(
            [tool("systemd-socket-activate", "systemd-activate"), "-l", self.socket,
             "-E", "NOTIFY_SOCKET=" + self.notify_path,
             DAEMON, "--socket", self.own_socket, "--cache-dir", os.path.join(self.tmp, "cache"),
             "--workers", str(workers), "--log-level", "info"],
            stdout=self.log, stderr=self.log)
        deadline = time.time() + 30
        while not os.path.exists(self.socket):
            assert self.proc.poll() is None, self.logtext()
            assert time.time() < deadline, "systemd-socket-activate made no socket"
            time.sleep(0.02)

    def logtext(self):
        with open(self.log_path, "rb") as f:
            return f.read().decode(errors="replace")

    def messages(self, until):
        """Datagrams on the notify socket, up to one containing until."""
        got = []
        while not any(until in m for m in got):
            got.append(self.notify.recv(4096).decode())
        return got

    def cli(self, *args, check=True, input=None):
        r = subprocess.run([CLI, "--socket", self.socket] + list(args), input=input,
                           capture_output=True, timeout=120)
        if check and r.returncode != 0:
            raise AssertionError("ptxcache %s: %s\n%s" % (args, r.stderr, self.logtext()))
        return r

    def cleanup(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self.log.close()
        self.notify.close()
        shutil.rmtree(self.tmp, ignore_errors=True)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.cleanup()


def test_socket_activation_notify_and_serve():
    with Activated() as a:
        # Nothing runs before the first connection; it starts the daemon,
        # which serves it on the inherited socket.
        r = a.cli("ping")
        assert b"ptxcached" in r.stdout, r.stdout
        msgs = a.messages("READY=1")
        assert any("STATUS=" in m for m in msgs), msgs
        assert os.path.realpath("/proc/%d/exe" % a.proc.pid) == os.path.realpath(DAEMON)
        assert "(from systemd)" in a.logtext(), a.logtext()
        assert not os.path.exists(a.own_socket), "made its own socket despite LISTEN_FDS"
        r = a.cli("compile", "-", input=small_ir("activated"))
        assert b".entry k_activated" in r.stdout, r.stdout

        a.proc.send_signal(signal.SIGTERM)
        assert any("STOPPING=1" in m for m in a.messages("STOPPING=1"))
        assert a.proc.wait(60) == 0, a.logtext()
        # The socket is systemd's: the daemon leaves it in place.
        assert os.path.exists(a.socket)


def test_socket_activation_holds_the_first_request_until_workers_are_warm():
    """The first connection starts the daemon, which answers it only once
    every worker has warmed up: by then READY=1 has gone to systemd, and
    the first answer already counts every worker warm."""
    with Activated(workers=3) as a:
        s = json.loads(a.cli("stats", "--json").stdout)
        assert s["workers"] == 3 and s["workers_ready"] == 3, s
        assert s["workers_spawned"] == 3 and s["warm_up_ms"] >= 0, s
        msgs = a.messages("READY=1")
        ready = [i for i, m in enumerate(msgs) if "READY=1" in m][0]
        assert any("STATUS=warming up" in m for m in msgs[:ready]), msgs
        assert re.search(r"serving: 3 of 3 workers warm after \d+ ms", a.logtext()), a.logtext()
        # The first compile goes to a warm worker: nothing starts for it.
        r = a.cli("compile", "--json", "-", input=small_ir("warmfirst"))
        assert json.loads(r.stdout)["status"] == "ok", r.stdout
        assert json.loads(a.cli("stats", "--json").stdout)["workers_spawned"] == 3


def test_socket_activation_members_of_the_socket_group_allowed():
    """The default allow-list is the socket file's group (SocketGroup=)."""
    with Activated() as a:
        os.chown(a.socket, 0, 4242)
        os.chmod(a.socket, 0o666)       # the daemon's check, not the file mode
        # The first connection starts the daemon; a stranger is refused.
        ftype, body = probe_as(a.socket, 4343, 4343)
        assert ftype == ERROR and body["code"] == b"denied", body
        assert "refused connection from uid 4343" in a.logtext()
        # A member of the group, by a supplementary group.
        assert probe_as(a.socket, 4343, 4343, groups=[4242])[0] == PONG
        # By primary group, through the CLI, a compile.
        r = cli_as(a.socket, 4444, 4242, "compile", "--json", "-", input=small_ir("grp"))
        assert r.returncode == 0 and b'"status":"ok"' in r.stdout, r.stderr


def service_unit(dest, bindir):
    text = open(UNIT_TEMPLATE).read().replace("@BINDIR@", bindir)
    path = os.path.join(dest, "ptxcached.service")
    with open(path, "w") as f:
        f.write(text)
    shutil.copy(os.path.join(ROOT, "systemd", "ptxcached.socket"), dest)
    return path


def test_service_exposure_at_most_3():
    analyze = tool("systemd-analyze")
    with tempfile.TemporaryDirectory() as t:
        unit = service_unit(t, "/usr/bin")
        r = subprocess.run([analyze, "security", "--offline=true", "--no-pager", unit],
                           capture_output=True, text=True, timeout=120)
        m = re.search(r"Overall exposure level for ptxcached\.service: ([0-9.]+)", r.stdout)
        if not m and "offline" in r.stderr:
            raise Skip("systemd-analyze security cannot run offline here")
        assert m, r.stdout + r.stderr
        assert float(m.group(1)) <= 3.0, r.stdout
        text = open(unit).read()
        for want in ("Type=notify", "OOMPolicy=continue", "KillMode=mixed", "User=ptxcache",
                     "RuntimeDirectory=ptxcache", "CacheDirectory=ptxcache",
                     "StateDirectory=ptxcache"):
            assert re.search("^" + re.escape(want) + "$", text, re.M), want
        # PrivateUsers= would map every client to the overflow uid.
        assert not re.search(r"^PrivateUsers=yes", text, re.M)
        # TimeoutStopSec leaves room for the daemon's shutdown-timeout.
        stop = int(re.search(r"^TimeoutStopSec=(\d+)$", text, re.M).group(1))
        assert stop > 30


def test_install_tree_units_pkgconfig_and_sysusers():
    analyze = tool("systemd-analyze")
    with tempfile.TemporaryDirectory() as d:
        r = subprocess.run(["make", "-s", "--no-print-directory", "-C", ROOT, "install",
                            "DESTDIR=" + d, "PREFIX=/usr"], capture_output=True, text=True,
                           timeout=600)
        assert r.returncode == 0, r.stdout + r.stderr
        want = ["usr/bin/ptxcached", "usr/bin/ptxcache", "usr/lib/libptxcache.a",
                "usr/lib/libptxcache.so", "usr/include/ptxcache.h",
                "usr/lib/pkgconfig/ptxcache.pc", "usr/lib/systemd/system/ptxcached.service",
                "usr/lib/systemd/system/ptxcached.socket", "usr/lib/sysusers.d/ptxcache.conf",
                "etc/ptxcache/ptxcached.conf", "usr/share/man/man1/ptxcache.1",
                "usr/share/man/man5/ptxcached.conf.5", "usr/share/man/man8/ptxcached.8"]
        for w in want:
            assert os.path.isfile(os.path.join(d, w)), w
        assert os.access(os.path.join(d, "usr/bin/ptxcached"), os.X_OK)
        unitdir = os.path.join(d, "usr/lib/systemd/system")
        service = open(os.path.join(unitdir, "ptxcached.service")).read()
        assert "ExecStart=/usr/bin/ptxcached\n" in service and "@BINDIR@" not in service
        # An edited config survives a second install.
        conf = os.path.join(d, "etc/ptxcache/ptxcached.conf")
        with open(conf, "a") as f:
            f.write("max-size = 1G\n")
        r = subprocess.run(["make", "-s", "--no-print-directory", "-C", ROOT, "install",
                            "DESTDIR=" + d, "PREFIX=/usr"], capture_output=True, timeout=600)
        assert r.returncode == 0 and open(conf).read().endswith("max-size = 1G\n")

        # pkg-config: a program built against the tree links and runs.
        env = dict(os.environ, PKG_CONFIG_PATH=os.path.join(d, "usr/lib/pkgconfig"),
                   PKG_CONFIG_SYSROOT_DIR=d, PKG_CONFIG_ALLOW_SYSTEM_CFLAGS="1",
                   PKG_CONFIG_ALLOW_SYSTEM_LIBS="1")
        flags = subprocess.run(["pkg-config", "--cflags", "--libs", "--static", "ptxcache"],
                               capture_output=True, text=True, env=env)
        assert flags.returncode == 0, flags.stderr
        assert "-I%s/usr/include" % d in flags.stdout and "-lptxcache" in flags.stdout, flags.stdout
        assert "-lmsgpackc" in flags.stdout, flags.stdout
        src, exe = os.path.join(d, "t.c"), os.path.join(d, "t")
        with open(src, "w") as f:
            f.write('#include <ptxcache.h>\n#include <stdio.h>\nint main(int c, char **v) {\n'
                    '  char err[256];\n  ptxcache *pc = ptxcache_connect(v[1], 2000, err, sizeof err);\n'
                    '  if (!pc) { printf("no daemon: %s\\n", err); return 3; }\n'
                    '  ptxcache_close(pc);\n  return 0;\n}\n')
        r = subprocess.run(["cc", "-o", exe, src] + flags.stdout.split() + ["-Wl,-rpath," + os.path.join(d, "usr/lib")],
                           capture_output=True, text=True)
        assert r.returncode == 0, r.stderr
        r = subprocess.run([exe, os.path.join(d, "none.sock")], capture_output=True, text=True)
        assert r.returncode == 3 and "none.sock" in r.stdout, (r.returncode, r.stdout)

        # sysusers.d: the ptxcache user and group.
        sysusers = shutil.which("systemd-sysusers")
        if sysusers:
            r = subprocess.run([sysusers, "--root=" + d], capture_output=True, text=True)
            assert r.returncode == 0, r.stderr
            assert re.search(r"^ptxcache:x:\d+:\d+:.*:/var/lib/ptxcache:", open(
                os.path.join(d, "etc/passwd")).read(), re.M)
            assert re.search(r"^ptxcache:x:\d+:", open(os.path.join(d, "etc/group")).read(), re.M)

        # systemd-analyze verify on the installed units, with the tree's
        # /usr/bin laid over the host's (ExecStart=/usr/bin/ptxcached must
        # exist) and its man pages on MANPATH (Documentation= is checked).
        units = [os.path.join(unitdir, u) for u in ("ptxcached.socket", "ptxcached.service")]
        man = [] if shutil.which("man") else ["--man=no"]
        verify = "MANPATH=%s %s verify %s" % (os.path.join(d, "usr/share/man"), analyze,
                                               " ".join(man + units))
        r = subprocess.run(["unshare", "-m", "sh", "-c",
                            "mount -t overlay overlay -o lowerdir=%s:/usr/bin /usr/bin && %s"
                            % (os.path.join(d, "usr/bin"), verify)],
                           capture_output=True, text=True, timeout=120)
        if r.returncode != 0 and ("mount" in r.stderr or "unshare" in r.stderr):
            # No private mounts here: install a second time under a real
            # prefix in the temp dir instead, and verify those units.
            p = os.path.join(d, "prefix")
            r = subprocess.run(["make", "-s", "--no-print-directory", "-C", ROOT, "install",
                                "PREFIX=" + p, "SYSCONFDIR=" + os.path.join(p, "etc")],
                               capture_output=True, text=True, timeout=600)
            assert r.returncode == 0, r.stderr
            units = [os.path.join(p, "lib/systemd/system", u)
                     for u in ("ptxcached.socket", "ptxcached.service")]
            r = subprocess.run([analyze, "verify"] + man + units, capture_output=True, text=True,
                               env=dict(os.environ, MANPATH=os.path.join(p, "share/man")),
                               timeout=120)
        assert r.returncode == 0 and not r.stderr.strip(), r.stdout + r.stderr


def test_sample_config_and_man_page_name_every_setting_with_its_default():
    r = subprocess.run([DAEMON, "--config", "/dev/null", "--print-config"], capture_output=True,
                       text=True, env={k: v for k, v in os.environ.items()
                                       if not k.startswith("PTXCACHE_")})
    assert r.returncode == 0, r.stderr
    defaults = dict(re.findall(r"^([a-z0-9-]+) = (.*)\t# default$", r.stdout, re.M))
    names = re.findall(r"^([a-z0-9-]+) = ", r.stdout, re.M)
    assert names and len(defaults) == len(names), r.stdout
    sample = open(os.path.join(ROOT, "systemd", "ptxcached.conf")).read()
    man = open(os.path.join(ROOT, "man", "ptxcached.conf.5")).read().replace("\\-", "-")
    for n in names:
        assert re.search(r"^#%s =" % re.escape(n), sample, re.M), "sample lacks " + n
        assert re.search(r"^\.B %s$" % re.escape(n), man, re.M), "man page lacks " + n
    # No line is active, and uncommented the shown values are the defaults.
    assert not re.search(r"^[a-z]", sample, re.M)
    with tempfile.TemporaryDirectory() as t:
        conf = os.path.join(t, "c.conf")
        with open(conf, "w") as f:
            f.write(re.sub(r"^#([a-z0-9-]+ = \S.*)$", r"\1", sample, flags=re.M))
        r = subprocess.run([DAEMON, "--config", conf, "--print-config"], capture_output=True,
                           text=True)
        assert r.returncode == 0, r.stderr
        for name, value, src in re.findall(r"^([a-z0-9-]+) = (.*)\t# (.*)$", r.stdout, re.M):
            assert value == defaults[name], (name, value, defaults[name], src)
