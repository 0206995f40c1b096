# SPDX-License-Identifier: Apache-2.0
"""A cache whose disk fills up (a real one: a small tmpfs): every put
still stores, the daemon making room from its own oldest entries
(store_put.c, disk_full_retries), where before every put after the disk filled
failed (store_errors) until someone made room. No size cap is set, so the
disk is the only bound."""
import os
import tempfile

from harness import Daemon, Raw, ROOT, frame, mp_pack, mp_unpack, slow_disk_env
from sysutil import tmpfs

import sys
sys.path.insert(0, os.path.join(ROOT, "python"))
from ptxcache import Client  # noqa: E402

DISK = 48 << 20         # bytes of the tmpfs
VALUE = 1 << 20        # one artifact: random bytes, so zstd cannot shrink them
SMALL = 100 << 10      # one kept in its row (under 256 KiB): its bytes go through the WAL
PUT = 11               # FRAME_ARTIFACT_PUT


def test_disk_full_puts_evict_the_oldest_and_keep_storing():
    with tmpfs(DISK) as mnt:
        with Daemon(workers=1, cache_dir=os.path.join(mnt, "cache"),
                    extra=["--max-size", "0", "--artifact-share", "100"]) as d:
            n = 4 * DISK // VALUE           # four disks' worth
            stored = []
            with Client(d.socket) as c:
                for i in range(n):
                    assert c.artifact_put("full", "k%d" % i, os.urandom(VALUE)), i
                    stored.append(i)
                s = d.stats()
                assert s["disk_full_retries"] >= 1 and s["evictions"] >= n // 2, s
                assert s["store_errors"] == 0, s
                # The newest are there, the oldest made room.
                assert c.artifact_get("full", "k%d" % (n - 1)).found
                assert not c.artifact_get("full", "k0").found
            # The cache is whole.
            r = d.cli("verify")
            assert r.returncode == 0, r.stdout


def test_a_full_disk_gets_its_room_at_once_though_unlinks_are_slow():
    """A removed entry's file is unlinked off the loop (store_files.c's
    file_unlink()), but not when the disk is full: the put's retry needs
    the room the evictions made now, not once a slow disk has unlinked
    their files (tests/tools/slowsync.c: 150 ms each)."""
    with tmpfs(16 << 20) as mnt, tempfile.TemporaryDirectory() as tmp:
        env = slow_disk_env(os.path.join(tmp, "slowed"), unlink_ms=150)
        with Daemon(workers=1, cache_dir=os.path.join(mnt, "cache"), env=env,
                    extra=["--max-size", "0", "--artifact-share", "100"]) as d:
            n = 2 * (16 << 20) // VALUE
            with Client(d.socket) as c:
                for i in range(n):
                    assert c.artifact_put("full", "k%d" % i, os.urandom(VALUE)), i
                assert c.artifact_get("full", "k%d" % (n - 1)).found
            s = d.stats()
            assert s["disk_full_retries"] >= 1 and s["store_errors"] == 0, s


def send_puts(raw, vals):
    """Sends the puts of vals (key -> value) in one write."""
    raw.send(b"".join(frame(PUT, mp_pack(dict(id=j, ns="full", key=k, value=v)))
                      for j, (k, v) in enumerate(vals.items())))


def answers(raw, vals):
    """The answers to the puts of vals, in the order sent, as (frame type,
    body); the socket's timeout (10 s) fails a put never answered."""
    out = []
    for _ in vals:
        got = raw.recv_frame()
        assert got is not None, "the daemon closed the connection"
        out.append((got[0], mp_unpack(got[1])))
    return out


def test_a_batch_that_meets_a_full_disk_is_redone_put_by_put_and_each_is_stored():
    """Small puts (kept in their rows), four in each write, each write
    sent while the daemon commits the one before, so that its puts wait
    whole in the socket and are read in one turn of the loop, sharing one
    commit (put_batch.c), until the disk is first full. The batch that
    meets it is rolled back whole and redone put by put, each put making
    its own room (store.c's retry), and only then answered: every put is
    answered "stored" and every one is there after (none answered for a
    savepoint that the full disk took back, none evicted by its
    batch-mates' room: the oldest entries go). Whether the loop reads a
    write's four puts in one turn is the scheduler's: where the disk was
    first full under a put read alone (about one run in five on 2 cores),
    that run's puts are checked and the test runs again on a fresh disk."""
    for _attempt in range(6):
        if _fill_in_batches():
            return
    raise AssertionError("in 6 runs the disk was never first full in a batch's commit")


def _fill_in_batches():
    """One run of the test above on a fresh disk; False where the disk was
    first full under a put alone (its puts all stored, nothing else said)."""
    with tmpfs(DISK) as mnt:
        with Daemon(workers=1, cache_dir=os.path.join(mnt, "cache"),
                    extra=["--max-size", "0", "--artifact-share", "100"]) as d:
            raw = Raw(d.socket)
            small = 40 << 10                # four in one write fit the socket's buffer
            sent, first = [], 0
            while not any(w in d.logtext() for w in ("one by one", "disk full under")):
                assert first < 2 * DISK // small, "the disk never filled"
                vals = {"k%d" % i: os.urandom(small) for i in range(first, first + 4)}
                send_puts(raw, vals)
                sent.append(vals)
                first += 4
                if len(sent) > 1:
                    done = sent.pop(0)
                    for key, (ftype, body) in zip(done, answers(raw, done)):
                        assert ftype == PUT | 0x80 and body.get("stored"), (key, body)
            for key, (ftype, body) in zip(sent[0], answers(raw, sent[0])):
                assert ftype == PUT | 0x80 and body.get("stored"), (key, body)
            raw.close()
            if "entries one by one" not in d.logtext():
                return False
            # The disk was first full in a batch's commit, redone put by put.
            with Client(d.socket) as c:
                for key, v in list(done.items()) + list(sent[0].items()):
                    assert c.artifact_get("full", key).value == v, key
                assert not c.artifact_get("full", "k0").found     # the oldest made room
            s = d.stats()
            assert s["disk_full_retries"] == 1 and s["store_errors"] == 0, s
            assert s["artifact_put_commits"] < s["artifact_puts"], s
            r = d.cli("verify")
            assert r.returncode == 0, r.stdout
            return True


def test_a_full_disk_whose_wal_outgrew_its_reserve_still_answers_every_put():
    """Small puts on a disk that fills, then fills again: their rows'
    bytes are in the WAL, which no checkpoint can move into a database
    that cannot grow, so the second time the full disk's room-making
    (store.c's make_room_on_disk()) commits its evictions with the WAL
    past CKPT_LOOP_PAGES, under its own hold of the checkpoint mutex.
    That commit's checkpoint (store_ckpt.c's on_commit()) must not take
    the mutex again: the loop waited on itself for ever, and this put,
    and every request after it, had no answer. Each put is answered
    (stored, or refused where the WAL left no room to evict), and the
    daemon answers after the flood."""
    with tmpfs(DISK) as mnt:
        with Daemon(workers=1, cache_dir=os.path.join(mnt, "cache"),
                    extra=["--max-size", "0", "--artifact-share", "100"]) as d:
            raw = Raw(d.socket)
            stored, i = None, 0
            while d.logtext().count("disk full under") < 2:     # made room twice
                assert i < 2 * DISK // SMALL, "the disk never filled twice"
                key, v = "k%d" % i, os.urandom(SMALL)
                send_puts(raw, {key: v})
                [(ftype, body)] = answers(raw, {key: v})
                assert ftype in (PUT | 0x80, 0xff), (key, ftype, body)
                if ftype == PUT | 0x80:
                    stored = (key, v)
                i += 1
            raw.close()
            s = d.stats()
            assert s["disk_full_retries"] >= 2, s
            with Client(d.socket) as c:
                assert c.artifact_get("full", stored[0]).value == stored[1]
