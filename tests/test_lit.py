# SPDX-License-Identifier: Apache-2.0
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
import shlex
import subprocess
import tempfile

from harness import CLI, LLC, LLVM_BIN, ROOT, Daemon, Skip
from test_llc_front import normalise_stderr

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
        # --diff: every llc command of the RUN lines, run by llc and by the
        # front: the same exit status or signal, stdout and stderr.
        runs, bad = diff_runs(suite, d), []
        for args, stdin, want, got in runs:
            if (want.returncode, want.stdout, normalise_stderr(want.stderr)) != \
               (got.returncode, got.stdout, normalise_stderr(got.stderr)):
                bad.append("%s%s:\n  llc   %s %r\n  front %s %r" % (
                    " ".join(args), " < " + stdin if stdin else "", want.returncode,
                    want.stderr[:300], got.returncode, got.stderr[:300]))
        print("     lit --diff: %d llc command lines, %d differ" % (len(runs), len(bad)))
        assert runs and not bad, "\n".join(bad[:10])


def llc_commands(path):
    """(args, stdin path or None) of each llc in a lit test's RUN lines."""
    text, lines = open(path).read(), []
    for m in re.finditer(r"^;\s*RUN:(.*)$", text, re.M):
        if lines and lines[-1].endswith("\\"):
            lines[-1] = lines[-1][:-1] + m.group(1)
        else:
            lines.append(m.group(1))
    out = []
    for line in lines:
        for seg in re.split(r"\||%\}|%\{|&&", line):
            toks = shlex.split(seg.replace("%s", path))
            if "llc" not in toks:
                continue
            toks = toks[toks.index("llc") + 1:]
            args, stdin, i = [], None, 0
            while i < len(toks):
                t = toks[i]
                if t == "<":
                    stdin, i = toks[i + 1], i + 2
                    continue
                if t in (">", "2>"):
                    i += 2
                    continue
                if t.startswith("2>") or t.startswith("%"):
                    i += 1
                    continue
                args.append(t)
                i += 1
            if "-o" not in args:
                args += ["-o", "-"]
            out.append((args, stdin))
    return out


def diff_runs(suite, d):
    env = dict(os.environ, PTXCACHE_SOCKET=d.socket)
    seen, runs = set(), []
    for f in sorted(os.listdir(suite)):
        if not f.endswith(".ll"):
            continue
        for args, stdin in llc_commands(os.path.join(suite, f)):
            if (tuple(args), stdin) in seen:
                continue
            seen.add((tuple(args), stdin))
            data = open(stdin, "rb").read() if stdin else None
            want = subprocess.run([LLC] + args, input=data, capture_output=True, timeout=300)
            got = subprocess.run([CLI, "llc"] + args, input=data, capture_output=True,
                                 timeout=300, env=env)
            runs.append((args, stdin, want, got))
    return runs
