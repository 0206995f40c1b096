"""LLVM's own NVPTX codegen tests (corpus/llvm-nvptx), run with lit through
`ptxcache llc` against the real daemon: every test must pass, as it does
with llc-22 itself."""
import os
import re
import subprocess
import tempfile

from harness import CLI, CORPUS, LLVM_BIN, Daemon, Skip


def test_llvm_nvptx_lit_suite_through_llc_front():
    suite = os.path.join(CORPUS, "llvm-nvptx")
    if not os.path.isdir(suite):
        raise Skip("no corpus at %s" % suite)
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
