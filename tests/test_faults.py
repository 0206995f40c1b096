# SPDX-License-Identifier: Apache-2.0
"""Disk full and write errors, end to end: the compile result still reaches
the client (a write error: uncached, counted in store_errors; a full disk:
stored once the store has made room from its oldest entries), hits keep
working, nothing is corrupted, and once space is back the cache works
again. Disk full is a
real full filesystem (a small tmpfs; skipped where mounting is not
allowed); write errors come from RLIMIT_FSIZE on the daemon (EFBIG, with
SIGXFSZ ignored by the daemon). tests/unit/test_faults.c does the same at
every failing allocation, write and fsync inside the store."""
import json
import os
import resource
import subprocess

from harness import DAEMON, TRITON_FLAGS, Daemon, Skip, llc

FLAGS = ["--arch", "sm_90a", "--ptx-isa", "90", "-O3"]
TEMPLATE = """target triple = "nvptx64-nvidia-cuda"
define ptx_kernel void @f_%s(ptr addrspace(1) %%a, float %%x) {
  %%v = load float, ptr addrspace(1) %%a
  %%w = fsub float %%v, %%x
  store float %%w, ptr addrspace(1) %%a
  ret void
}
"""


def kernel(tag):
    return (TEMPLATE % tag).encode()


def compile_json(d, ir):
    r = d.cli("compile", *FLAGS, "--json", "-", input=ir)
    return json.loads(r.stdout)


def verify(cache_dir):
    r = subprocess.run([DAEMON, "--verify", "--cache-dir", cache_dir], capture_output=True,
                       timeout=120)
    return r.returncode, (r.stdout + r.stderr).decode(errors="replace")


def reference(ir):
    r = llc(TRITON_FLAGS + ["-o", "-"], input=ir)
    assert r.returncode == 0, r.stderr
    return r.stdout.decode()


class LimitedDaemon(Daemon):
    """A daemon whose file writes stop at fsize bytes (RLIMIT_FSIZE)."""

    fsize = None

    def start(self, wait=True):
        limit = self.fsize

        def pre():
            if limit is not None:
                resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
        self.log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(self.args, stdout=self.log, stderr=self.log, env=self.env,
                                     preexec_fn=pre)
        if wait:
            self.wait_ready()
        return self


def fill_until_store_error(d, prefix, limit=300):
    """Compile new kernels until one is not stored; every reply must be a
    good compile. Returns (stored [(ir, ptx)], failed [(ir, ptx)])."""
    stored, failed = [], []
    errors0 = d.stats()["store_errors"]
    for i in range(limit):
        ir = kernel("%s%d" % (prefix, i))
        j = compile_json(d, ir)
        assert j["status"] == "ok" and j["cached"] is False and j["ptx"], j
        if d.stats()["store_errors"] > errors0:
            failed.append((ir, j["ptx"]))
            if len(failed) == 3:
                return stored, failed
        else:
            stored.append((ir, j["ptx"]))
    raise AssertionError("no store error after %d compiles" % limit)


def check_degraded_then_recovered(d, hit, stored, failed):
    # Results reached the client with the right bytes.
    assert failed[0][1] == reference(failed[0][0]), "uncached result differs from llc"
    # Hits keep working.
    for ir, ptx in [hit] + stored:
        j = compile_json(d, ir)
        assert j["cached"] is True and j["ptx"] == ptx, j
    # A failed entry was not stored: asked again, it compiles again, fine.
    j = compile_json(d, failed[0][0])
    assert j["status"] == "ok" and j["cached"] is False and j["ptx"] == failed[0][1], j


def test_disk_full_results_still_reach_clients():
    """The disk fills up (another file takes the space): every compile is
    still answered with llc's bytes, and the store keeps storing by making
    room from its own oldest entries (disk_full_retries), where it used to
    fail every put until someone made room (tests/test_disk_full.py: the
    same for artifacts, on a disk the cache itself fills)."""
    with Daemon(workers=1) as d0:
        mnt = os.path.join(d0.tmp, "small")
        os.makedirs(mnt)
        r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", mnt],
                           capture_output=True)
        if r.returncode != 0:
            raise Skip("cannot mount a small tmpfs: %s" % r.stderr.decode().strip())
        try:
            cache = os.path.join(mnt, "cache")
            d = Daemon(workers=1, cache_dir=cache)
            try:
                compile_json(d, kernel("full_first"))
                # Take all the space that is left.
                filler = os.path.join(mnt, "filler")
                with open(filler, "wb", buffering=0) as f:     # nothing left to flush at close
                    try:
                        while True:
                            f.write(b"\0" * 65536)
                            f.flush()
                    except OSError:
                        pass
                answered = []
                for i in range(40):
                    ir = kernel("full%d" % i)
                    j = compile_json(d, ir)
                    assert j["status"] == "ok" and j["cached"] is False and j["ptx"], j
                    answered.append((ir, j["ptx"]))
                assert answered[0][1] == reference(answered[0][0]), "result differs from llc"
                s = d.stats()
                assert s["disk_full_retries"] >= 1 and s["evictions"] >= 1, s
                assert s["corrupt_blobs"] == 0, s
                # Stored, though the disk was full: the newest are hits.
                for ir, ptx in answered[-3:]:
                    j = compile_json(d, ir)
                    assert j["cached"] is True and j["ptx"] == ptx, (j, s)
                # Space again: new results are stored as ever.
                os.unlink(filler)
                again = kernel("full_after")
                first = compile_json(d, again)
                assert compile_json(d, again)["cached"] is True and first["ptx"]
                d.stop()
                rc, out = verify(cache)
                assert rc == 0, out
                d.start()
                for ir, ptx in answered[-3:]:
                    j = compile_json(d, ir)
                    assert j["cached"] is True and j["ptx"] == ptx, j
            finally:
                d.cleanup()
        finally:
            subprocess.run(["umount", "-l", mnt], capture_output=True)
    print("     disk full: %d answered, %d puts made room first, hits served, verify ok"
          % (len(answered), s["disk_full_retries"]))


def test_write_errors_results_still_reach_clients():
    d = LimitedDaemon(workers=1)
    try:
        hit_ir = kernel("efbig_hit")
        hit = (hit_ir, compile_json(d, hit_ir)["ptx"])
        d.stop()            # checkpointed: the WAL is empty again
        db = os.path.join(d.cache_dir, "cache.db")
        d.fsize = max(os.path.getsize(db), os.path.getsize(d.log_path)) + 48 * 1024
        d.start()
        stored, failed = fill_until_store_error(d, "efbig")
        check_degraded_then_recovered(d, hit, stored, failed)
        s = d.stats()
        assert s["store_errors"] >= len(failed) and s["corrupt_blobs"] == 0, s
        assert d.proc.poll() is None
        d.stop()
        rc, out = verify(d.cache_dir)
        assert rc == 0, out
        d.fsize = None
        d.start()
        for ir, ptx in [hit] + stored:
            j = compile_json(d, ir)
            assert j["cached"] is True and j["ptx"] == ptx, j
        j = compile_json(d, failed[1][0])
        assert j["cached"] is False and j["ptx"] == failed[1][1], j
        assert compile_json(d, failed[1][0])["cached"] is True
    finally:
        d.cleanup()
    print("     write errors (EFBIG): %d stored, %d answered uncached, hits served, verify ok"
          % (len(stored), len(failed)))
