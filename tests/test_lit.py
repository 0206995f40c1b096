"""LLVM's own NVPTX codegen tests, run with lit through `ptxcache llc`
against the real daemon: every test must pass, as it does with llc-22
itself.

They are LLVM's files and are not part of this repository: the suite (a
folder of LLVM NVPTX tests with a lit config that honours NVPTX_LIT_LLC) is
found at $PTXCACHE_LLVM_LIT_SUITE, else at shared/corpus/llvm-nvptx in the
folder that holds the clone. Where neither exists this test skips, and says
so: it is the only test that may skip for missing data."""
import os
import re
import subprocess
import tempfile

from harness import CLI, LLVM_BIN, ROOT, Daemon, Skip

SUITE = os.environ.get("PTXCACHE_LLVM_LIT_SUITE") or \
    os.path.join(os.path.dirname(ROOT), "shared", "corpus", "llvm-nvptx")


def test_llvm_nvptx_lit_suite_through_llc_front():
    suite = SUITE
    if not os.path.isdir(suite):
        raise Skip("LLVM's NVPTX lit tests are not in this repository and none were found at "
                   "%s (set PTXCACHE_LLVM_LIT_SUITE)" % suite)
    with Daemon() as d, tempfile.TemporaryDirectory() as out:
        env = dict(os.environ, NVPTX_LIT_LLC=CLI + " llc", PTXCACHE_SOCKET=d.socket,
                   NVPTX_LIT_EXEC_ROOT=out)
        r = subprocess.run([os.path.join(LLVM_BIN, "lit"), "-v", "-j2", suite],
                           capture_output=True, text=True, env=env, timeout=1200)
        total = len([f for f in os.listdir(suite) if f.endswith(".ll")])
        m = re.search(r"Passed\s*:\s*(\d+)", r.stdout)
        passed = int(m.group(1)) if m else 0
        assert r.returncode == 0 and passed == total, \
            "lit: %d of %d passed\n%s" % (passed, total, r.stdout[-6000:])
        # The front really went through the daemon.
        assert d.stats()["compiles"] > 0
