# SPDX-License-Identifier: Apache-2.0
"""Cache management through the daemon's socket: ls, show, explain, evict,
purge, verify, warm, and stats in its three formats."""
import json
import os
import re
import sqlite3
import tempfile

from harness import Daemon, Skip, small_ir, triton_kernels
from sysutil import cli_as, make_reachable

BAD_IR = b"define void @f() {\n  ret i32\n}\n"


def warm(d, *paths, arch="sm_90a"):
    return d.cli("warm", "--quiet", "--arch", arch, *paths)


def test_ls_filters_and_show():
    k = triton_kernels()[:2]
    with Daemon() as d:
        warm(d, *k, arch="sm_90a,sm_80")
        rows = json.loads(d.cli("ls", "--json").stdout)
        assert len(rows) == 4 and {r["arch"] for r in rows} == {"sm_90a", "sm_80"}, rows
        only80 = json.loads(d.cli("ls", "--arch", "sm_80", "--json").stdout)
        assert len(only80) == 2 and all(r["arch"] == "sm_80" for r in only80)
        assert json.loads(d.cli("ls", "--kind", "cubin", "--json").stdout) == []
        assert len(json.loads(d.cli("ls", "--min-size", "1G", "--json").stdout)) == 0
        assert len(json.loads(d.cli("ls", "--older-than", "1d", "--json").stdout)) == 0
        table = d.cli("ls").stdout.decode()
        assert table.splitlines()[0].split()[:3] == ["KEY", "KIND", "ARCH"] and len(table.splitlines()) == 5
        shown = json.loads(d.cli("show", rows[0]["key"], "--json").stdout)
        assert shown["components"]["cpu"] == rows[0]["arch"] and shown["data_len"] > 0, shown
        r = d.cli("show", "0" * 64, check=False)
        assert r.returncode != 0 and b"no such entry" in r.stderr
        r = d.cli("show", "xyz", check=False)
        assert r.returncode != 0 and b"64 hex digits" in r.stderr


def test_show_negative_entry_has_error_text():
    with Daemon() as d:
        r = d.cli("compile", "--json", "-", input=BAD_IR, check=False)
        key = json.loads(r.stdout)["key"]
        shown = json.loads(d.cli("show", key, "--json").stdout)
        assert shown["status"] != 0 and "error" in shown["log"], shown


def test_explain_names_the_differing_component():
    k = triton_kernels()[0]
    with Daemon() as d:
        d.cli("compile", "--arch", "sm_90a", "--ptx-isa", "90", k)
        e = json.loads(d.cli("explain", "--arch", "sm_90a", "--ptx-isa", "90", k, "--json").stdout)
        assert e["cached"] is True and e["nearest"] is None, e
        e = json.loads(d.cli("explain", "--arch", "sm_90a", "--ptx-isa", "90", "-O2", k, "--json").stdout)
        assert e["cached"] is False
        diff = {x["name"]: (x["stored"], x["requested"]) for x in e["nearest"]["differing"]}
        assert diff == {"opt": ("3", "2")}, diff
        text = d.cli("explain", "--arch", "sm_80", "--ptx-isa", "90", k).stdout.decode()
        assert "not cached" in text and "cpu" in text and "sm_80" in text, text


def test_evict_purge_and_warm_counts():
    k = triton_kernels()[:2]
    with Daemon() as d:
        out = warm(d, *k, arch="sm_90a,sm_80").stdout.decode()
        assert "4 compiled, 0 already cached, 0 failed" in out, out
        out = warm(d, *k, arch="sm_90a,sm_80").stdout.decode()
        assert "0 compiled, 4 already cached" in out, out
        r = json.loads(d.cli("evict", "--arch", "sm_80", "--json").stdout)
        assert r["removed"] == 2 and r["entries"] == 2, r
        r = json.loads(d.cli("evict", "--max-size", "1", "--json").stdout)
        assert r["entries"] == 0, r
        warm(d, *k)
        assert d.stats()["entries"] == 2
        r = json.loads(d.cli("purge", "--json").stdout)
        assert r["removed"] == 2 and r["entries"] == 0
        r = d.cli("evict", check=False)
        assert r.returncode != 0 and b"needs a filter" in r.stderr


def test_warm_a_directory_reports_failures():
    with Daemon() as d, tempfile.TemporaryDirectory() as t:
        os.makedirs(os.path.join(t, "sub"))
        with open(os.path.join(t, "sub", "bad.ll"), "wb") as f:
            f.write(BAD_IR)
        with open(os.path.join(t, "notes.txt"), "w") as f:
            f.write("not IR")
        src = triton_kernels()[0]
        with open(src, "rb") as a, open(os.path.join(t, "good.ll"), "wb") as b:
            b.write(a.read())
        r = d.cli("warm", t, check=False)
        assert r.returncode == 1, r
        assert b"1 compiled, 0 already cached, 1 failed" in r.stdout, r.stdout
        assert b"bad.ll" in r.stderr


def test_verify_reports_a_damaged_blob():
    k = triton_kernels()[:2]
    # No background confirmation: one that read the damaged entry after
    # the first verify would drop it (a corrupt entry is deleted where it
    # is read) before the stopped-cache verify below.
    with Daemon(extra=["--confirm-workers", "0"]) as d:
        warm(d, *k)
        assert b"0 problems" in d.cli("verify").stdout
        db = sqlite3.connect(os.path.join(d.cache_dir, "cache.db"))
        db.execute("UPDATE entries SET data = zeroblob(length(data)) WHERE rowid = "
                   "(SELECT min(rowid) FROM entries)")
        db.commit()
        db.close()
        r = d.cli("verify", check=False)
        assert r.returncode == 1 and b"1 problems found" in r.stdout, r.stdout
        # And the stopped-cache mode agrees.
        d.stop()
        import subprocess
        r = subprocess.run([d.args[0], "--verify", "--cache-dir", d.cache_dir], capture_output=True)
        assert r.returncode == 1 and b"1 problem found" in r.stdout, r.stdout


def test_stats_formats():
    with Daemon() as d:
        table = d.cli("stats").stdout.decode()
        assert re.search(r"^hits\s+0$", table, re.M), table
        prom = d.cli("stats", "--prometheus").stdout.decode()
        assert "# TYPE ptxcache_hits_total counter\nptxcache_hits_total 0\n" in prom, prom
        assert "# TYPE ptxcache_entries gauge" in prom
        assert "# TYPE ptxcache_warm_up_ms gauge" in prom, prom
        j = d.stats()
        # Any answer comes from a ready daemon: its workers are warm.
        assert j["warm_up_ms"] >= 0 and j["workers_ready"] == j["workers"], j
        for key in ("entries", "bytes", "hits", "misses", "compiles", "compile_errors",
                    "worker_crashes", "dedup_joins"):
            assert key in j, key


def test_namespace_per_uid_separates_entries():
    ir = open(triton_kernels()[0], "rb").read()
    with Daemon() as shared:
        e1 = json.loads(shared.cli("explain", "-", "--json", input=ir).stdout)
    with Daemon(extra=["--namespace-per-uid", "yes"]) as ns:
        e2 = json.loads(ns.cli("explain", "-", "--json", input=ir).stdout)
    assert "namespace" not in e1["components"], e1
    assert e2["components"]["namespace"] == "uid:%d" % os.getuid(), e2
    assert e1["key"] != e2["key"]


def test_a_uid_sees_only_its_own_entries_on_the_main_socket():
    """Two uids on the main socket: what one compiled or stored, ls (of
    every kind), show, explain and evict never name for the other, nor
    does verify report (or remove) the first's damaged entry; the first
    sees its own; root (the admin) sees both."""
    if os.geteuid() != 0:
        raise Skip("needs root to run clients as other users")
    a, b = 65534, 54321
    ir = small_ir("uid_view")
    flags = ["--arch", "sm_90a", "--ptx-isa", "90"]
    with Daemon(extra=["--allow-users", "%d,%d" % (a, b)]) as d:
        make_reachable(d.socket)

        def as_(uid, *args, input=None):
            r = cli_as(d.socket, uid, uid, *args, input=input)
            assert r.returncode in (0, 1), (args, r.stderr)
            return r

        ptx = json.loads(as_(a, "compile", *flags, "--json", "-", input=ir).stdout)["key"]
        assert as_(a, "artifact", "put", "a-secret-ns", "a-secret-key", "-",
                   input=b"a's").returncode == 0
        mine = json.loads(as_(a, "ls", "--json").stdout)
        assert sorted(e["kind"] for e in mine) == ["artifact", "ptx"], mine
        art = [e["key"] for e in mine if e["kind"] == "artifact"][0]
        secrets = [ptx, art, "a-secret-ns", "a-secret-key"]

        assert json.loads(as_(b, "ls", "--json").stdout) == []
        for kind in ("ptx", "cubin", "artifact"):
            assert json.loads(as_(b, "ls", "--kind", kind, "--json").stdout) == [], kind
        for key in (ptx, art):
            r = as_(b, "show", key)
            assert r.returncode != 0 and b"no such entry" in r.stderr, r
        r = as_(b, "explain", *flags, "-O2", "--json", "-", input=ir)
        e = json.loads(r.stdout)
        assert e["cached"] is False and e["nearest"] is None, e
        r3 = as_(b, "evict", "--kind", "artifact", "--json")
        assert json.loads(r3.stdout)["removed"] == 0 and json.loads(r3.stdout)["entries"] == 0
        for out in (r.stdout, r3.stdout, as_(b, "ls").stdout):
            assert [s for s in secrets if s in out.decode()] == [], out
        assert as_(a, "artifact", "get", "a-secret-ns", "a-secret-key").stdout == b"a's"

        e = json.loads(as_(a, "explain", *flags, "-O2", "--json", "-", input=ir).stdout)
        assert e["nearest"]["key"] == ptx, e
        every = {e["key"] for e in json.loads(d.cli("ls", "--json").stdout)}
        assert {ptx, art} <= every, every
        assert json.loads(d.cli("show", art, "--json").stdout)["key"] == art

        # a's artifact damaged in the store: b's verify neither reports it
        # nor removes it; a's and the admin's report it.
        db = sqlite3.connect(os.path.join(d.cache_dir, "cache.db"))
        db.execute("UPDATE entries SET data = zeroblob(length(data)) WHERE hex(key) = ?",
                   (art.upper(),))
        db.commit()
        db.close()
        r = as_(b, "verify", "--json")
        assert json.loads(r.stdout) == {"problems": 0, "report": []}, r.stdout
        for r in (as_(a, "verify", "--json"), d.cli("verify", "--json", check=False)):
            v = json.loads(r.stdout)
            assert r.returncode == 1 and v["problems"] == 1, v
            assert v["report"][0].startswith("entry %s: " % art), v


def test_an_entry_a_uid_is_answered_with_is_its_own_too():
    """Under sharing = trust a uid's compile of another's kernel is a hit:
    from then on that entry is in its ls and show, and explain finds it
    cached; what it never asked for stays out of sight."""
    if os.geteuid() != 0:
        raise Skip("needs root to run clients as other users")
    b = 65534
    flags = ["--arch", "sm_90a", "--ptx-isa", "90"]
    ir, other = small_ir("hit_view"), small_ir("hit_view_other")
    with Daemon(extra=["--allow-users", str(b), "--sharing", "trust"]) as d:
        make_reachable(d.socket)
        key = json.loads(d.cli("compile", *flags, "--json", "-", input=ir).stdout)["key"]
        d.cli("compile", *flags, "-", input=other)
        r = cli_as(d.socket, b, b, "explain", *flags, "--json", "-", input=ir)
        assert json.loads(r.stdout)["cached"] is False, r.stdout
        hits = d.stats()["hits"]
        r = cli_as(d.socket, b, b, "compile", *flags, "--json", "-", input=ir)
        assert r.returncode == 0 and json.loads(r.stdout)["key"] == key, r
        assert d.stats()["hits"] == hits + 1
        seen = json.loads(cli_as(d.socket, b, b, "ls", "--json").stdout)
        assert [e["key"] for e in seen] == [key], seen
        assert cli_as(d.socket, b, b, "show", key).returncode == 0
        r = cli_as(d.socket, b, b, "explain", *flags, "--json", "-", input=ir)
        assert json.loads(r.stdout)["cached"] is True, r.stdout
        assert len(json.loads(d.cli("ls", "--json").stdout)) == 2


def test_an_entry_replaced_or_recreated_by_another_uid_leaves_the_first_view():
    """Who may see an entry goes with the row it saw (schema.sql's
    triggers on entry_users): under sharing = trust two uids share one
    artifact scope, so they put under the same key. Once b's put has
    replaced a's value, or the admin evicted a's and b's put created the
    key anew, a's ls, show and evict no longer name that entry (it never
    stored nor was answered with b's bytes); b's do."""
    if os.geteuid() != 0:
        raise Skip("needs root to run clients as other users")
    a, b = 65534, 54321
    with Daemon(extra=["--allow-users", "%d,%d" % (a, b), "--sharing", "trust"]) as d:
        make_reachable(d.socket)

        def as_(uid, *args, input=None):
            r = cli_as(d.socket, uid, uid, *args, input=input)
            assert r.returncode in (0, 1), (args, r.stderr)
            return r

        def seen_by(uid):
            return sorted(e["key"] for e in json.loads(as_(uid, "ls", "--json").stdout))

        def put(uid, ns, value):
            assert as_(uid, "artifact", "put", ns, "k", "-", input=value).returncode == 0

        # a's puts, each in a's view (its ls writes the notes down).
        put(a, "replaced", b"a's")
        [k1] = seen_by(a)
        put(a, "recreated", b"a's")
        [k2] = [k for k in seen_by(a) if k != k1]
        # Replaced: b's put over a's row.
        put(b, "replaced", b"b's")
        assert as_(b, "artifact", "get", "replaced", "k").stdout == b"b's"
        # Recreated: a's row evicted by the admin, then put anew by b.
        r = json.loads(d.cli("evict", "--namespace", "recreated", "--json").stdout)
        assert r["removed"] == 1, r
        put(b, "recreated", b"b's")
        assert seen_by(b) == sorted([k1, k2])

        assert seen_by(a) == [], "a still sees b's entries"
        for key in (k1, k2):
            r = as_(a, "show", key)
            assert r.returncode != 0 and b"no such entry" in r.stderr, r
        r = json.loads(as_(a, "evict", "--kind", "artifact", "--json").stdout)
        assert r["removed"] == 0, r
        assert seen_by(b) == sorted([k1, k2])
