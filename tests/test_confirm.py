"""No user can change what another user receives (daemon/confirm.h): each
worker serves one user, an entry reaches a second user only once a worker
of that user's own computed the same bytes, a mismatch is an alarm, and
only confirmed entries reach the Redis tier. Clients of three users (root,
nobody and a uid of no account) on one real daemon."""
import os
import tempfile

from harness import LLC, PROBE_DAEMON, Daemon, Skip, small_ir
from redis_fixture import RedisServer
from sysutil import cli_as, make_reachable

B, C = 65534, 54321
FLAGS = ["-mtriple=nvptx64", "-mcpu=sm_90a"]


def llc_bytes(ir):
    import subprocess
    return subprocess.run([LLC] + FLAGS, input=ir, capture_output=True, check=True).stdout


def as_user(d, uid, ir):
    r = cli_as(d.socket, uid, uid, "llc", *FLAGS, input=ir)
    assert r.returncode == 0, r.stderr
    return r.stdout


def daemon(**kw):
    if os.geteuid() != 0:
        raise Skip("needs root to run clients as other users")
    extra = ["--allow-users", "%d,%d" % (B, C)] + kw.pop("extra", [])
    d = Daemon(workers=2, extra=extra, **kw)
    make_reachable(d.socket)
    return d


def test_one_user_pays_nothing_a_second_confirms_once_a_third_hits():
    kernels = [small_ir("share%d" % i) for i in range(4)]
    with daemon() as d:
        for k in kernels:
            assert d.cli("llc", *FLAGS, input=k).stdout == llc_bytes(k)
        s = d.stats()
        assert s["compiles"] == 4 and s["confirmations"] == 0 and s["sharing"] == "confirm", s
        for k in kernels:                       # a second user: one confirmation each
            assert as_user(d, B, k) == llc_bytes(k)
        s = d.stats()
        assert s["compiles"] == 8 and s["confirmations"] == 4, s
        assert s["confirm_mismatches"] == 0, s
        for k in kernels:                       # confirmed: everyone hits
            assert as_user(d, C, k) == llc_bytes(k)
            assert d.cli("llc", *FLAGS, input=k).stdout == llc_bytes(k)
        assert d.stats()["compiles"] == 8


def test_trust_shares_at_once_and_separate_never():
    k = small_ir("policy")
    with daemon(extra=["--sharing", "trust"]) as d:
        d.cli("llc", *FLAGS, input=k)
        assert as_user(d, B, k) == llc_bytes(k)
        assert d.stats()["compiles"] == 1
    with daemon(extra=["--sharing", "separate"]) as d, tempfile.TemporaryDirectory() as t:
        d.cli("llc", *FLAGS, input=k)
        as_user(d, B, k)
        as_user(d, B, k)
        s = d.stats()
        assert s["compiles"] == 2 and s["confirmations"] == 0, s
        # Cubins too: a PTX file's key holds no uid, the producer decides.
        ptx = os.path.join(t, "k.ptx")
        with open(ptx, "wb") as f:
            f.write(llc_bytes(small_ir("separate_cubin")))
        os.chmod(t, 0o755)
        os.chmod(ptx, 0o644)
        r = d.cli("compile", "--json", "--cubin", ptx, check=False)
        if b'"status":"unavailable"' not in r.stdout:       # a ptxas here
            r2 = cli_as(d.socket, B, B, "compile", "--json", "--cubin", ptx)
            assert r2.returncode == 0 and b'"cached":false' in r2.stdout, r2.stdout
            assert d.stats()["compiles"] == 4


def test_compromised_worker_changes_only_what_its_own_user_receives():
    """User A's worker is taken over (the test-only "compromise" probe: it
    answers every compile with altered PTX from then on). A gets the altered
    bytes for kernel K (its own worker); B gets llc's; the mismatch is an
    alarm, counted once; Redis never sees the altered bytes; C gets llc's."""
    k = small_ir("victim")
    with RedisServer() as redis, tempfile.TemporaryDirectory() as t:
        secret = os.path.join(t, "secret")
        with open(secret, "wb") as f:
            f.write(b"secret for the confirmation test")
        with daemon(binary=PROBE_DAEMON, extra=["--l2", redis.url, "--l2-secret-file", secret]) as d:
            r = d.cli("compile", "--json", "-", check=False,
                      input=b"; ptxcache-probe: compromise\n" + small_ir("takeover"))
            assert b"compromise: ok" in r.stdout, r.stdout
            altered = d.cli("llc", *FLAGS, input=k).stdout
            assert altered.startswith(b"// altered by a compromised worker"), altered[:80]
            assert as_user(d, B, k) == llc_bytes(k)
            assert as_user(d, C, k) == llc_bytes(k)
            s = d.stats()
            assert s["confirm_mismatches"] == 1, s
            assert "confirmation mismatch" in d.logtext() and "uid 0" in d.logtext()
            # A, whose worker it is, is still served its own bytes.
            assert d.cli("llc", *FLAGS, input=k).stdout == altered
            values = [redis.get(key) for key in redis.keys("ptxcache:*")]
            assert not any(b"altered by a compromised worker" in (v or b"") for v in values), \
                len(values)


def test_entries_made_under_trust_stay_their_producers_after_a_switch_to_confirm():
    """An entry stored under sharing = trust records who produced it, so
    that a site that moves to confirm serves it to nobody else until
    another user's worker has computed the same bytes: a switch of policy
    never widens who is served what."""
    k = small_ir("trust_then_confirm")
    with daemon(extra=["--sharing", "trust"]) as d:
        assert d.cli("llc", *FLAGS, input=k).stdout == llc_bytes(k)     # uid 0 produces
        assert d.stats()["compiles"] == 1
        d.stop()
        d.args[d.args.index("trust")] = "confirm"
        d.start()
        make_reachable(d.socket)
        assert as_user(d, B, k) == llc_bytes(k)
        s = d.stats()
        assert s["sharing"] == "confirm", s
        # B was not served uid 0's unconfirmed entry: its own worker
        # compiled it, which confirmed the entry.
        assert s["hits"] == 0 and s["compiles"] == 1 and s["confirmations"] == 1, s
        assert s["confirm_mismatches"] == 0, s
        assert as_user(d, C, k) == llc_bytes(k)                         # confirmed: C hits
        assert d.stats()["compiles"] == 1
        assert d.cli("llc", *FLAGS, input=k).stdout == llc_bytes(k)
        assert d.stats()["compiles"] == 1
