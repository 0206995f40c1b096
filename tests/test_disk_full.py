# SPDX-License-Identifier: Apache-2.0
"""A cache whose disk fills up (a real one: a small tmpfs): every put
still stores, the daemon making room from its own oldest entries
(store_put.c, disk_full_retries), where before every put after the disk filled
failed (store_errors) until someone made room. No size cap is set, so the
disk is the only bound."""
import os
import tempfile

from harness import Daemon, ROOT, slow_disk_env
from sysutil import tmpfs

import sys
sys.path.insert(0, os.path.join(ROOT, "python"))
from ptxcache import Client  # noqa: E402

DISK = 48 << 20         # bytes of the tmpfs
VALUE = 1 << 20        # one artifact: random bytes, so zstd cannot shrink them


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
