"""The shared tier end to end: two real daemons (two nodes, separate cache
directories) and one real redis-server."""
import concurrent.futures
import json
import os
import tempfile
import time

from harness import TRITON_FLAGS, Daemon, llc, triton_kernels
from redis_fixture import RedisServer

SECRET = b"cluster secret for the tests\n"


def node(redis, tmp, *extra, timeout_ms=2000):
    secret = os.path.join(tmp, "secret")
    with open(secret, "wb") as f:
        f.write(SECRET)
    return Daemon(extra=["--l2", redis.url, "--l2-secret-file", secret,
                         "--l2-timeout-ms", str(timeout_ms)] + list(extra))


def compile_all(d, kernels):
    return [d.cli("llc", *TRITON_FLAGS, k, "-o", "-").stdout for k in kernels]


def wait_for(pred, what, limit=60):
    deadline = time.time() + limit
    while not pred():
        assert time.time() < deadline, "timed out waiting for " + what
        time.sleep(0.05)


def test_second_node_gets_first_nodes_kernels_without_compiling():
    kernels = triton_kernels()[:6]
    with RedisServer() as r, tempfile.TemporaryDirectory() as t:
        with node(r, t) as a:
            first = compile_all(a, kernels)
            wait_for(lambda: a.stats()["l2_writes"] == len(kernels), "writes to Redis")
        with node(r, t) as b:
            second = compile_all(b, kernels)
            s = b.stats()
            assert s["compiles"] == 0 and s["l2_hits"] == len(kernels), s
            assert s["entries"] == len(kernels), s       # stored locally too
            assert first == second == [llc(TRITON_FLAGS + [k, "-o", "-"]).stdout for k in kernels]
            # Now local hits: Redis is not asked again.
            compile_all(b, kernels)
            assert b.stats()["l2_hits"] == len(kernels)


def test_read_only_node_publishes_nothing():
    k = triton_kernels()[:2]
    with RedisServer() as r, tempfile.TemporaryDirectory() as t:
        with node(r, t, "--l2-read-only", "yes") as a:
            compile_all(a, k)
            assert a.stats()["l2_writes"] == 0
        assert r.keys("ptxcache:*") == []


def test_tampered_values_are_rejected_compiled_locally_never_stored():
    kernels = triton_kernels()[:5]
    with RedisServer() as r, tempfile.TemporaryDirectory() as t:
        with node(r, t) as a:
            compile_all(a, kernels)
            wait_for(lambda: a.stats()["l2_writes"] == len(kernels), "writes to Redis")
        keys = sorted(r.keys("ptxcache:*"))
        assert len(keys) == len(kernels)
        good = [r.get(k) for k in keys]
        flip = bytearray(good[0])
        flip[len(flip) // 2] ^= 1
        r.set(keys[0], bytes(flip))                     # a flipped payload byte
        bad_mac = bytearray(good[1])
        bad_mac[-1] ^= 0x80
        r.set(keys[1], bytes(bad_mac))                  # a broken HMAC
        r.set(keys[2], good[3])                         # another key's valid value
        r.set(keys[3], good[3][:4] + b"\x09" + good[3][5:])  # wrong version
        r.set(keys[4], good[4][: len(good[4]) // 2])    # truncated
        with node(r, t) as b:
            out = compile_all(b, kernels)
            s = b.stats()
            assert s["l2_rejects"] == 5 and s["l2_hits"] == 0, s
            assert out == [llc(TRITON_FLAGS + [k, "-o", "-"]).stdout for k in kernels]
            # Each compile is confirmed in the background before it is
            # published again (sharing = confirm): one more compile each.
            wait_for(lambda: b.stats()["confirmations"] == len(kernels), "confirmations")
            assert b.stats()["compiles"] == 2 * len(kernels), b.stats()
            # What B stored came from its own compiles: repeats are local
            # hits with the right bytes.
            assert compile_all(b, kernels) == out
            assert b.stats()["compiles"] == 2 * len(kernels)


def test_redis_gone_and_back_every_request_answered():
    kernels = triton_kernels()[:12]
    with RedisServer() as r, tempfile.TemporaryDirectory() as t:
        with node(r, t, timeout_ms=50) as a:
            compile_all(a, kernels[:2])
            r.stop()
            out = compile_all(a, kernels[2:10])
            assert all(out), "a request went unanswered"
            s = a.stats()
            assert s["l2_errors"] + s["l2_timeouts"] >= 5 and s["l2_breaker_opens"] >= 1, s
            r.start()
            # Recovery: the breaker's probe finds Redis again and writes go on.
            before = a.stats()["l2_writes"]

            def recovered():
                a.cli("compile", "-", input=("; %f\n" % time.time()).encode() + open(kernels[10], "rb").read())
                return a.stats()["l2_writes"] > before
            wait_for(recovered, "recovery after Redis returned")


def test_slow_redis_times_out_and_requests_are_answered():
    k = triton_kernels()[:3]
    with RedisServer() as r, tempfile.TemporaryDirectory() as t:
        with node(r, t, timeout_ms=50) as a:
            sleeper = r.sleep(2)
            out = compile_all(a, k)
            sleeper.join()
            assert all(out)
            assert a.stats()["l2_timeouts"] >= 1, a.stats()


def test_burst_of_identical_requests_reads_redis_once():
    k = triton_kernels()[0]
    with RedisServer() as r, tempfile.TemporaryDirectory() as t:
        with node(r, t) as a:
            compile_all(a, [k])
            wait_for(lambda: a.stats()["l2_writes"] == 1, "the write to Redis")
        r.reset_stats()
        with node(r, t, "--workers", "1") as b:
            with concurrent.futures.ThreadPoolExecutor(8) as ex:
                outs = list(ex.map(lambda _: compile_all(b, [k])[0], range(8)))
            assert len(set(outs)) == 1
            s = b.stats()
            reads = r.calls("getrange") + r.calls("get")
            assert reads == 1, (reads, s)
            assert s["compiles"] == 0 and s["l2_hits"] == 1, s


def test_sealed_value_with_impossible_status_is_compiled_not_trusted():
    """A value that verifies (right secret, identity, key) but carries a
    status no daemon stores: the request compiles locally and the bad value
    is never answered or stored."""
    from test_l2_live import seal
    k = triton_kernels()[0]
    ir = open(k, "rb").read()
    with RedisServer() as r, tempfile.TemporaryDirectory() as t:
        with node(r, t, "--l2-read-only", "yes") as a:
            key = json.loads(a.cli("compile", "--json", "-", input=ir).stdout)["key"]
            identity = a.stats()["compiler"].encode()
        r.set("ptxcache:" + key, seal(key, b"not ptx", kind=1, status=99,
                                     identity=identity, secret=SECRET.rstrip(b"\n")))
        with node(r, t) as b:
            got = json.loads(b.cli("compile", "--json", "-", input=ir).stdout)
            s = b.stats()
            assert got["status"] == "ok" and "not ptx" not in got["ptx"], got
            assert s["compiles"] == 1 and s["l2_hits"] in (0, 1), s
            again = json.loads(b.cli("compile", "--json", "-", input=ir).stdout)
            assert again["cached"] and again["ptx"] == got["ptx"]
