# SPDX-License-Identifier: Apache-2.0
"""A cache whose disk fills up (a real one: a small tmpfs): every put
still stores, the daemon making room from its own oldest entries
(store.c, disk_full_retries), where before every put after the disk filled
failed (store_errors) until someone made room. No size cap is set, so the
disk is the only bound."""
import os

from harness import Daemon, ROOT
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
