# SPDX-License-Identifier: Apache-2.0
"""Operating the daemon: settings (file, environment, flags, --print-config),
SIGHUP reload, SIGTERM with compiles in flight, the access policy, and the
log format. The real daemon on private sockets."""
import os
import re
import signal
import subprocess
import tempfile
import threading
import time

from harness import DAEMON, Daemon, Raw, Skip, frame, mp_pack
from sysutil import cli_as, make_reachable, mp_unpack, probe_as, small_ir

ERROR = 0xff
PONG = 0x82


def ping_frame(rid):
    return frame(2, b"\x81\xa2id" + bytes([rid]))


def clean_env(**more):
    """The environment without any PTXCACHE_* setting, plus more."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PTXCACHE_")}
    env.update(more)
    return env


def print_config(*args, env=None):
    """--print-config as {name: (value, source)}."""
    r = subprocess.run([DAEMON] + list(args) + ["--print-config"], capture_output=True,
                       text=True, env=env if env is not None else clean_env(), timeout=60)
    assert r.returncode == 0, r.stderr
    out = {}
    for line in r.stdout.splitlines():
        m = re.match(r"^([a-z0-9-]+) = (.*)\t# (.*)$", line)
        assert m, "unexpected --print-config line %r" % line
        out[m.group(1)] = (m.group(2), m.group(3))
    return out


def write(path, text):
    with open(path, "w") as f:
        f.write(text)


def wait_log(d, pattern, count=1, timeout=60):
    """Wait until the daemon's log has count lines matching pattern."""
    deadline = time.time() + timeout
    while True:
        n = len(re.findall(pattern, d.logtext()))
        if n >= count:
            return
        assert d.proc.poll() is None, "daemon exited:\n" + d.logtext()
        assert time.time() < deadline, "no %r in the log:\n%s" % (pattern, d.logtext())
        time.sleep(0.02)


def reload(d, conf, text):
    """Rewrite the config file, SIGHUP, wait for the daemon to take it."""
    n = len(re.findall(r"configuration reloaded|reload failed", d.logtext()))
    write(conf, text)
    d.proc.send_signal(signal.SIGHUP)
    wait_log(d, r"configuration reloaded|reload failed", n + 1)


def first_frame(path):
    """Connect as root, send a ping, return (type, body) of the answer."""
    c = Raw(path)
    try:
        c.send(ping_frame(7))
    except OSError:
        pass
    f = c.recv_frame()
    c.close()
    assert f is not None, "daemon closed the connection without a frame"
    return f[0], mp_unpack(f[1])[0]


def test_config_precedence_flag_env_file_default():
    with tempfile.TemporaryDirectory() as t:
        conf = os.path.join(t, "ptxcached.conf")
        write(conf, "# a comment\n\n  max-size = 3G   # trailing comment\nlog-level = debug\n"
              "allow-groups = video, 44\n")
        c = print_config("--config", conf)
        assert c["max-size"] == (str(3 << 30), conf + ":3"), c["max-size"]
        assert c["log-level"] == ("debug", conf + ":4"), c["log-level"]
        assert c["allow-groups"] == ("video, 44", conf + ":5"), c["allow-groups"]
        assert c["job-timeout"] == ("120", "default"), c["job-timeout"]

        env = clean_env(PTXCACHE_MAX_SIZE="5G", PTXCACHE_CONFIG=conf)
        c = print_config(env=env)       # the file through PTXCACHE_CONFIG
        assert c["max-size"] == (str(5 << 30), "environment PTXCACHE_MAX_SIZE"), c["max-size"]
        assert c["log-level"] == ("debug", conf + ":4"), c["log-level"]

        c = print_config("--max-size", "7G", env=env)
        assert c["max-size"] == (str(7 << 30), "flag"), c["max-size"]
        assert c["log-level"] == ("debug", conf + ":4")

        # No file entry, no environment: the default.
        empty = os.path.join(t, "empty.conf")
        write(empty, "")
        c = print_config("--config", empty)
        assert c["max-size"] == (str(10 << 30), "default"), c["max-size"]
        # Dashes become underscores in the environment.
        c = print_config("--config", empty, env=clean_env(PTXCACHE_MAX_JOBS_PER_UID="3"))
        assert c["max-jobs-per-uid"] == ("3", "environment PTXCACHE_MAX_JOBS_PER_UID")


def test_bad_settings_refused_with_exit_2_and_a_clear_message():
    with tempfile.TemporaryDirectory() as t:
        sock = os.path.join(t, "run", "s.sock")
        conf = os.path.join(t, "ptxcached.conf")
        cases = [
            ("workers = 2\nmax-size = lots\n", None, [conf + ":2", "max-size", "lots"]),
            ("no-such-thing = 1\n", None, [conf + ":1", "unknown setting 'no-such-thing'"]),
            ("workers 2\n", None, [conf + ":1", "name = value"]),
            ("log-level = loud\n", None, ["loud", "error, warning, info or debug"]),
            ("", {"PTXCACHE_WORKERS": "0"}, ["environment PTXCACHE_WORKERS", "'0'"]),
        ]
        for text, env, want in cases:
            write(conf, text)
            r = subprocess.run([DAEMON, "--config", conf, "--socket", sock,
                                "--cache-dir", os.path.join(t, "cache")],
                               capture_output=True, text=True, env=clean_env(**(env or {})),
                               timeout=60)
            assert r.returncode == 2, (text, r.returncode, r.stderr)
            for w in want:
                assert w in r.stderr, (text, w, r.stderr)
            assert not os.path.exists(sock), "daemon started despite %r" % text
        r = subprocess.run([DAEMON, "--config", os.path.join(t, "missing.conf"), "--print-config"],
                           capture_output=True, text=True, env=clean_env(), timeout=60)
        assert r.returncode == 2 and "missing.conf" in r.stderr, r.stderr
        r = subprocess.run([DAEMON, "--max-size"], capture_output=True, text=True,
                           env=clean_env(), timeout=60)
        assert r.returncode == 2, r.stderr


def test_sighup_reloads_live_settings_and_keeps_them_on_a_bad_file():
    with tempfile.TemporaryDirectory() as t:
        conf = os.path.join(t, "ptxcached.conf")
        write(conf, "")
        with Daemon(workers=1, extra=["--config", conf, "--log-level", "info"],
                    env=clean_env()) as d:
            held = Raw(d.socket)        # one connection open
            held.send(ping_frame(1))
            assert held.recv_frame()[0] == PONG
            d.cli("ping")               # a second one is fine: limit 1024

            reload(d, conf, "max-connections = 1\nwarm-cpu = sm_80\n")
            log = d.logtext()
            assert "reload: max-connections changed (%s:1)" % conf in log, log
            assert "warm-cpu changed; it takes effect at the next start" in log, log
            ftype, body = first_frame(d.socket)
            assert ftype == ERROR and body["code"] == b"limit", body
            assert b"limit 1" in body["message"], body
            r = d.cli("ping", check=False)
            assert r.returncode != 0 and b"too many connections" in r.stderr, r.stderr

            # A file with an error is refused whole: the old limit stays.
            reload(d, conf, "max-connections = 50\nmax-size = lots\n")
            assert "reload failed, keeping the old settings" in d.logtext()
            assert first_frame(d.socket)[1]["code"] == b"limit"

            reload(d, conf, "max-connections = 2\n")
            d.cli("ping")
            held.close()


def test_sigterm_answers_inflight_compile_refuses_new_and_exits_0():
    with Daemon(workers=1, extra=["--log-level", "info"], env=clean_env()) as d:
        (w,) = d.workers()
        os.kill(w, signal.SIGSTOP)      # hold the compile in flight
        out = {}
        t = threading.Thread(target=lambda: out.update(
            r=d.cli("compile", "--json", "-", input=small_ir("term"), check=False)))
        t.start()
        open_conn = Raw(d.socket)
        try:
            d.wait_stats(lambda s: s["jobs_running"] >= 1, "the compile's start")
            d.proc.send_signal(signal.SIGTERM)
            wait_log(d, r"stopping; 1 compiles in flight")
            # New connections are refused while the compile finishes.
            ftype, body = first_frame(d.socket)
            assert ftype == ERROR and b"shutting down" in body["message"], body
            # So is a new compile on a connection that was already open.
            open_conn.send(frame(3, mp_pack({"id": 5, "input": small_ir("term2")})))
            ftype, raw = open_conn.recv_frame()
            assert ftype == ERROR and b"shutting down" in raw, raw
            assert d.proc.poll() is None
        finally:
            os.kill(w, signal.SIGCONT)
        t.join(120)
        r = out["r"]
        assert r.returncode == 0 and b'"status":"ok"' in r.stdout, (r.stdout, r.stderr)
        assert d.proc.wait(60) == 0, d.logtext()
        assert "stopping anyway" not in d.logtext()
        assert not os.path.exists(d.socket), "socket left behind"
        # WAL checkpointed: nothing left in a -wal file.
        wal = [f for f in os.listdir(d.cache_dir) if f.endswith("-wal")]
        assert all(os.path.getsize(os.path.join(d.cache_dir, f)) == 0 for f in wal), wal
        # The result was stored before the answer: a hit after restart.
        d.log.close()
        d.start()
        r = d.cli("compile", "--json", "-", input=small_ir("term"))
        assert b'"cached":true' in r.stdout, r.stdout


def test_sigterm_deadline_stops_a_stuck_compile():
    with Daemon(workers=1, extra=["--shutdown-timeout", "1", "--log-level", "info"],
                env=clean_env()) as d:
        (w,) = d.workers()
        os.kill(w, signal.SIGSTOP)
        t = threading.Thread(target=lambda: d.cli("compile", "-", input=small_ir("stuck"),
                                                  check=False))
        t.start()
        deadline = time.time() + 60
        while d.stats()["jobs_running"] < 1:
            assert time.time() < deadline
            time.sleep(0.02)
        d.proc.send_signal(signal.SIGTERM)
        assert d.proc.wait(60) == 0
        t.join(60)
        assert "1 compiles still running after 1 s; stopping anyway" in d.logtext(), d.logtext()


def test_access_policy_denies_other_users_until_allowed():
    with tempfile.TemporaryDirectory() as t:
        conf = os.path.join(t, "ptxcached.conf")
        write(conf, "")
        with Daemon(workers=1, extra=["--config", conf, "--log-level", "info"],
                    env=clean_env()) as d:
            make_reachable(d.socket)
            ftype, body = probe_as(d.socket, 65534, 65534)
            assert ftype == ERROR and body["code"] == b"denied", body
            assert b"uid 65534" in body["message"], body
            assert re.search(r"^<4>ptxcached\[\d+\]: refused connection from uid 65534 ",
                             d.logtext(), re.M), d.logtext()
            r = cli_as(d.socket, 65534, 65534, "ping")
            assert r.returncode != 0 and b"not allowed" in r.stderr, r.stderr
            assert d.stats()["denied_connections"] == 2

            # Allowed by name of uid, through a reload.
            reload(d, conf, "allow-users = someone-else, 65534\n")
            r = cli_as(d.socket, 65534, 65534, "compile", "--json", "-", input=small_ir("acl"))
            assert r.returncode == 0 and b'"status":"ok"' in r.stdout, r.stderr

            # Groups: a supplementary group counts (SO_PEERGROUPS).
            assert probe_as(d.socket, 4343, 4343, groups=[4242])[1]["code"] == b"denied"
            reload(d, conf, "allow-groups = 4242\n")
            ftype, body = probe_as(d.socket, 4343, 4343, groups=[4242])
            assert ftype == PONG, body
            assert probe_as(d.socket, 4343, 4343)[1]["code"] == b"denied"
            # And 65534 is out again: the file no longer lists it.
            assert probe_as(d.socket, 65534, 65534)[1]["code"] == b"denied"


def test_access_by_flag_and_root_always_allowed():
    with Daemon(workers=1, extra=["--allow-users", "65534"], env=clean_env()) as d:
        make_reachable(d.socket)
        assert probe_as(d.socket, 65534, 65534)[0] == PONG
        assert probe_as(d.socket, 0, 0)[0] == PONG
        assert probe_as(d.socket, 1234, 1234)[1]["code"] == b"denied"


def test_log_lines_one_per_event_with_syslog_priorities():
    """Every line the daemon writes is one event with a <N> priority prefix,
    even when the event carries a tool's multi-line stderr."""
    r = subprocess.run([DAEMON, "--help"], capture_output=True, text=True)
    if "--ptxas" not in r.stdout:
        raise Skip("this daemon has no cubin stage")
    real = "/usr/local/cuda/bin/ptxas"
    if not os.access(real, os.X_OK):
        raise Skip("no ptxas at %s" % real)
    with tempfile.TemporaryDirectory() as t:
        fake = os.path.join(t, "ptxas")
        write(fake, "#!/bin/sh\n"
              'case " $* " in *" --version "*) exec %s "$@";; esac\n'
              "echo 'ptxas: first line' >&2\necho 'ptxas: second line' >&2\n"
              "kill -SEGV $$\n" % real)
        os.chmod(fake, 0o755)
        with Daemon(workers=1, extra=["--ptxas", fake, "--log-level", "debug"],
                    env=clean_env()) as d:
            r = d.cli("compile", "--cubin", "-", input=small_ir("twolines"), check=False)
            assert r.returncode != 0
            d.proc.send_signal(signal.SIGHUP)
            wait_log(d, r"configuration reloaded")
            assert d.stop() == 0
            log = d.logtext()
            assert "ptxas: first line\\nptxas: second line" in log, log
            for line in log.splitlines():
                assert re.match(r"^<[3467]>ptxcached\[\d+\]: \S", line), "bad log line %r" % line
            assert "@k_twolines" not in log, "IR in the log"
