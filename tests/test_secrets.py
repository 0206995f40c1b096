# SPDX-License-Identifier: Apache-2.0
"""The shared tier's secrets are never shown: the password of an l2 URL is
"***" in --print-config, in the log (a Redis that is down, one that refuses
the password, a reload that names a bad URL), in stats (`ptxcache stats`,
`python3 -m ptxcache status`) and in errors, for redis://, rediss:// and
redis-cluster:// URLs with and without a user name (the user name kept);
the secret file's bytes are never shown at all. Each password and secret
is a marker of its own, searched for in everything the daemon prints
(daemon/l2_conf.c, l2_url_redacted())."""
import os
import secrets
import signal
import socket
import subprocess
import sys
import tempfile
import time

from harness import CLI, DAEMON, ROOT, Daemon, small_ir
from redis_fixture import RedisServer

PKG = os.path.join(ROOT, "python")


def _closed_port():
    """A loopback port nothing listens on (bound, then let go)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _forms(port):
    """(name, URL holding the password marker, the URL as it must be shown,
    the marker): each form the tier's URL takes."""
    out = []
    for name, tmpl in (
            ("redis-user", "redis://ptxuser:%s@127.0.0.1:%d/0"),
            ("redis-nouser", "redis://:%s@127.0.0.1:%d/0"),
            ("rediss-user", "rediss://ptxuser:%s@127.0.0.1:%d"),
            ("rediss-nouser", "rediss://:%s@127.0.0.1:%d"),
            ("cluster-user", "redis-cluster://ptxuser:%s@127.0.0.1:%d,127.0.0.1:1"),
            ("cluster-nouser", "redis-cluster://:%s@127.0.0.1:%d,127.0.0.1:1")):
        mark = "pw" + secrets.token_hex(8)
        out.append((name, tmpl % (mark, port), tmpl % ("***", port), mark))
    return out


def _secret_file(tmp):
    mark = "sk" + secrets.token_hex(8)
    path = os.path.join(tmp, "secret")
    with open(path, "w") as f:
        f.write(mark + "\n")
    return path, mark


def _hidden(text, *marks):
    for m in marks:
        assert m not in text, "secret %s shown:\n%s" % (m, text)


def test_secrets_print_config_shows_the_password_as_stars():
    """--print-config, from a flag and from the config file, each form."""
    with tempfile.TemporaryDirectory() as t:
        sfile, smark = _secret_file(t)
        conf = os.path.join(t, "ptxcached.conf")
        env = {k: v for k, v in os.environ.items() if not k.startswith("PTXCACHE_")}
        for name, url, shown, mark in _forms(_closed_port()):
            with open(conf, "w") as f:
                f.write("l2 = %s\nl2-secret-file = %s\n" % (url, sfile))
            for how, args, source in (
                    ("flag", ["--l2", url, "--l2-secret-file", sfile], "flag"),
                    ("file", [], conf + ":1")):
                r = subprocess.run([DAEMON, "--config", conf, "--socket", os.path.join(t, "s"),
                                    "--cache-dir", os.path.join(t, "c")] + args + ["--print-config"],
                                   capture_output=True, text=True, timeout=30, env=env)
                assert r.returncode == 0, (name, how, r.stderr)
                _hidden(r.stdout + r.stderr, mark, smark)
                lines = [x for x in r.stdout.splitlines() if x.startswith("l2 = ")]
                assert lines == ["l2 = %s\t# %s" % (shown, source)], (name, how, lines)


def _wait_log(d, pred, what, limit=30):
    deadline = time.time() + limit
    while not pred(d.logtext()):
        assert time.time() < deadline, "%s never logged:\n%s" % (what, d.logtext())
        time.sleep(0.05)


def _daemon_on(url, t, sfile):
    """A daemon whose l2 URL comes from its config file (so that a reload
    can change it), logging everything."""
    conf = os.path.join(t, "ptxcached.conf")
    with open(conf, "w") as f:
        f.write("l2 = %s\nl2-secret-file = %s\n" % (url, sfile))
    return Daemon(workers=1, extra=["--config", conf, "--log-level", "debug"]), conf


def _exercise_and_reload(d, conf, name, url, mark, where):
    """Compiles that ask the tier (which fails), then a reload to a URL that
    cannot be parsed, holding the same password: every log line is there.
    where: what an l2 error line must name (the server, or the URL with its
    user name and "***")."""
    for i in range(6):
        d.cli("compile", "--arch", "sm_90a", "-", "-o", "-",
              input=small_ir("sec%s%d" % (name.replace("-", ""), i)))
    _wait_log(d, lambda s: any("l2: " in x and where in x for x in s.splitlines()),
              "an l2 line naming %s" % where)
    with open(conf) as f:
        text = f.read()
    bad = url.replace("@127.0.0.1:", "@127.0.0.1:x")
    with open(conf, "w") as f:
        f.write(text.replace(url, bad))
    d.proc.send_signal(signal.SIGHUP)
    _wait_log(d, lambda s: "reload: the shared tier keeps its settings" in s, "the refused reload")
    return bad


def test_secrets_the_log_shows_no_password():
    """A daemon whose Redis is down (each form), or up but refusing the
    password: its log at debug level, a refused reload included, names the
    server and never the password or the secret."""
    port = _closed_port()
    with tempfile.TemporaryDirectory() as t:
        sfile, smark = _secret_file(t)
        for name, url, shown, mark in _forms(port):
            if name.startswith("rediss"):
                continue            # refused at start: test_secrets_errors_...
            d, conf = _daemon_on(url, t, sfile)
            with d:
                # A single server is named by its URL (the user name and
                # "***"), a cluster's node by its address.
                where = shown if name.startswith("redis-") else "127.0.0.1:%d" % port
                bad = _exercise_and_reload(d, conf, name, url, mark, where)
                log = d.logtext()
                _hidden(log, mark, smark)
                # The reload's error names the URL, its user name kept.
                assert bad.replace(mark, "***") in log, (name, log)
        # Up, refusing the password (no such user; a default user without
        # one): the refusal is logged, the password not.
        with RedisServer(tcp=True) as r:
            for name, url, shown, mark in _forms(r.port)[:2]:
                d, conf = _daemon_on(url, t, sfile)
                with d:
                    bad = _exercise_and_reload(d, conf, name, url, mark, shown)
                    log = d.logtext()
                    assert "l2: %s: ERR AUTH" % shown in log or \
                        "l2: %s: WRONGPASS" % shown in log, (name, log)
                    _hidden(log, mark, smark)
                    assert bad.replace(mark, "***") in log, (name, log)


def test_secrets_errors_show_no_password():
    """A URL the daemon refuses (rediss://, which it does not speak; a bad
    port): the error names it with its password as "***"."""
    with tempfile.TemporaryDirectory() as t:
        sfile, smark = _secret_file(t)
        env = {k: v for k, v in os.environ.items() if not k.startswith("PTXCACHE_")}
        env["PTXCACHE_CONFIG"] = os.path.join(t, "none.conf")
        open(env["PTXCACHE_CONFIG"], "w").close()
        for name, url, shown, mark in _forms(_closed_port()):
            if not name.startswith("rediss"):
                url = url.replace("@127.0.0.1:", "@127.0.0.1:x")
                shown = shown.replace("@127.0.0.1:", "@127.0.0.1:x")
            r = subprocess.run([DAEMON, "--socket", os.path.join(t, "s"), "--cache-dir",
                                os.path.join(t, "c"), "--workers", "1", "--l2", url,
                                "--l2-secret-file", sfile],
                               capture_output=True, text=True, timeout=60, env=env)
            assert r.returncode != 0, (name, r.stdout, r.stderr)
            _hidden(r.stdout + r.stderr, mark, smark)
            assert "'%s'" % shown in r.stderr, (name, shown, r.stderr)


def test_secrets_stats_and_status_show_the_password_as_stars():
    """`ptxcache stats` (text and JSON) and `python3 -m ptxcache status`
    name the tier's URL, its password "***"."""
    with tempfile.TemporaryDirectory() as t:
        sfile, smark = _secret_file(t)
        for name, url, shown, mark in _forms(_closed_port()):
            if name.startswith("rediss"):
                continue
            with Daemon(workers=1, extra=["--l2", url, "--l2-secret-file", sfile]) as d:
                j = d.stats()
                assert j["l2"] == shown, (name, j.get("l2"))
                text = d.cli("stats").stdout.decode()
                _hidden(text + str(j), mark, smark)
                assert ["l2", shown] in [x.split(None, 1) for x in text.splitlines()], (name, text)
                env = {k: v for k, v in os.environ.items() if not k.startswith(("PTXCACHE_", "PYTHON"))}
                env.update(PYTHONPATH=PKG, PTXCACHE_SOCKET=d.socket, PTXCACHE_AUTOSTART="0",
                           PTXCACHE_BIN=CLI, HOME=t, PYTHONDONTWRITEBYTECODE="1")
                r = subprocess.run([sys.executable, "-m", "ptxcache", "status", "--no-import"],
                                   env=env, capture_output=True, text=True, timeout=60)
                _hidden(r.stdout + r.stderr, mark, smark)
                assert "shared tier: %s" % shown in r.stdout.splitlines(), (name, r.stdout, r.stderr)
