# SPDX-License-Identifier: Apache-2.0
"""The WAL's checkpoints off the loop (daemon/store_ckpt.c): a slow
checkpoint (its fdatasync()s slowed by tests/tools/slowsync.c, as no test
machine has a slow disk) holds up no client, a stop waits for it and loses
nothing, and a stream of puts keeps the WAL within the full disk's reserve
(store.c) although the thread's checkpoints never catch up with it, and
however slow they are."""
import os
import tempfile
import threading

from harness import Daemon, ROOT, slow_disk_env

import sys
sys.path.insert(0, os.path.join(ROOT, "python"))
from ptxcache import Client  # noqa: E402

# Values stored in their rows (under store_blobs.c's 256 KiB), random so that
# each takes its size in WAL pages.
ROW_VALUE = 200 << 10
# The WAL's size from which a commit hands the thread a checkpoint
# (store_ckpt.c's CKPT_PAGES: 500 pages and their frame headers).
MARK = 500 * (4096 + 24)
RESERVE = 16 << 20     # store_int.h's RESERVE_BYTES


def slow_checkpoints(d, log, ms):
    """Start d again with every fdatasync() of cache.db or its WAL
    sleeping ms first: SQLite's syncs, of which a commit makes none under
    synchronous=NORMAL and a checkpoint two (the cache's creation, before
    WAL mode, makes more: d made it without the fault). What was slowed
    so far (the open's own syncs of its new WAL)."""
    d.stop()
    d.env.update(slow_disk_env(log), SLOWDATASYNC_MATCH="/cache.db", SLOWSYNC_MS=str(ms))
    d.start()
    return slowed(log)


def fill_wal(d, c, upto):
    """Put row values until the WAL holds upto bytes; the values put."""
    wal = os.path.join(d.cache_dir, "cache.db-wal")
    values = {}
    while not os.path.exists(wal) or os.path.getsize(wal) < upto:
        k = "v%d" % len(values)
        values[k] = os.urandom(ROW_VALUE)
        assert c.artifact_put("t", k, values[k])
        assert len(values) < 100, "the WAL did not grow"
    return values


def slowed(log):
    if not os.path.exists(log):
        return []
    with open(log) as f:
        return f.read().splitlines()


def test_a_slow_checkpoint_holds_up_no_client():
    with tempfile.TemporaryDirectory() as tmp:
        log = os.path.join(tmp, "slowed")
        with Daemon(workers=1) as d:
            before = slow_checkpoints(d, log, 1500)
            with Client(d.socket) as c:
                assert c.artifact_put("t", "small", b"s" * 1024)
                values = fill_wal(d, c, MARK + (64 << 10))
                d.wait_stats(lambda s: s["checkpointing"] == 1, "a checkpoint queued", limit=20)
                # Its first fdatasync sleeps 1.5 s (on the loop, the put
                # that filled the WAL would have waited for both syncs
                # before its answer): meanwhile gets and puts are answered.
                assert c.artifact_get("t", "small").value == b"s" * 1024
                assert c.artifact_get("t", "v0").value == values["v0"]
                assert c.artifact_put("t", "during", b"d" * 1024)
                assert c.artifact_get("t", "during").value == b"d" * 1024
                assert slowed(log) == before, "the checkpoint's sync ended before the answers"
                s = d.wait_stats(lambda s: s["checkpoints"] >= 1 and not s["checkpointing"],
                                 "the checkpoint's end")
                assert s["checkpoint_errors"] == 0, s
            d.stop()
            d.start()
            with Client(d.socket) as c:
                for k, v in values.items():
                    assert c.artifact_get("t", k).value == v, k
                assert c.artifact_get("t", "during").value == b"d" * 1024
            assert d.cli("verify").returncode == 0
        # The fault was there: the WAL's sync and the database's.
        got = slowed(log)[len(before):]
        assert any(x.startswith("fdatasync ") and x.endswith("/cache.db-wal") for x in got), got
        assert any(x.startswith("fdatasync ") and x.endswith("/cache.db") for x in got), got


def test_a_stop_during_a_checkpoint_waits_for_it_and_loses_nothing():
    with tempfile.TemporaryDirectory() as tmp:
        log = os.path.join(tmp, "slowed")
        with Daemon(workers=1) as d:
            slow_checkpoints(d, log, 1000)
            with Client(d.socket) as c:
                values = fill_wal(d, c, MARK + (64 << 10))
            # Its syncs take 2 s: the stop comes during them.
            d.wait_stats(lambda s: s["checkpointing"] == 1, "a checkpoint queued", limit=20)
            d.proc.terminate()
            assert d.proc.wait(60) == 0, d.logtext()
            d.start()
            with Client(d.socket) as c:
                for k, v in values.items():
                    assert c.artifact_get("t", k).value == v, k
            assert d.cli("verify").returncode == 0


def stream_of_puts(d, total):
    """Put 25 KB values (a Triton kernel's entry) until total bytes, while
    a second client puts too (the loop is seldom idle); the WAL's largest
    size seen after a put."""
    wal = os.path.join(d.cache_dir, "cache.db-wal")
    largest, puts = 0, 0
    stop = threading.Event()

    def other():
        with Client(d.socket) as c:
            i = 0
            while not stop.is_set():
                c.artifact_put("u", "w%d" % i, os.urandom(8 << 10))
                i += 1
    th = threading.Thread(target=other)
    th.start()
    try:
        with Client(d.socket) as c:
            value = os.urandom(25000)
            while puts < total // 25000:
                assert c.artifact_put("t", "k%d" % puts, value)
                puts += 1
                largest = max(largest, os.path.getsize(wal))
    finally:
        stop.set()
        th.join(60)
    return largest


def test_a_stream_of_puts_keeps_the_wal_within_the_reserve():
    """While puts keep coming, every checkpoint of the thread's leaves the
    frames committed while it ran, and SQLite starts the WAL again only at
    a commit that finds none left: without the loop's own checkpoint at
    its mark the WAL would grow for as long as the puts come."""
    with Daemon(workers=1) as d:
        largest = stream_of_puts(d, 3 * RESERVE)
        s = d.stats()
        assert s["checkpoints"] >= 1 and s["checkpoint_errors"] == 0, s
        assert largest < RESERVE, "the WAL reached %d bytes" % largest


def test_the_wal_stays_within_the_reserve_however_slow_the_thread():
    """At its mark the commit waits for the thread's checkpoint in
    progress, then checkpoints the rest. Were it to skip its own while the
    thread's runs (SQLite would find the checkpoint lock taken), the WAL
    would grow through every slow checkpoint of the thread's: here each of
    its syncs takes 200 ms while the puts go on."""
    with tempfile.TemporaryDirectory() as tmp:
        log = os.path.join(tmp, "slowed")
        with Daemon(workers=1) as d:
            slow_checkpoints(d, log, 200)
            largest = stream_of_puts(d, 2 * RESERVE)
            s = d.stats()
            assert s["checkpoint_errors"] == 0, s
            assert largest < RESERVE, "the WAL reached %d bytes" % largest
        assert any(x.startswith("fdatasync ") for x in slowed(log)), "no sync was slowed"
