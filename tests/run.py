#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Runs every ptxcache test: the C unit tests (build/unit), then each
test_* function of tests/test_*.py against the real daemon. Ends with one
line "N passed, N failed, N skipped" and exits non-zero on any failure.

usage: tests/run.py [-k SUBSTRING] [--no-unit] [--only-skip NAME,...]

--only-skip: a skip of any test not named there counts as a failure (CI runs
a lone clone so: only the LLVM lit suite, which lives outside the
repository, may skip there).
"""
import importlib
import os
import re
import subprocess
import sys
import time
import traceback

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402


def main():
    args = sys.argv[1:]
    pattern = None
    if "-k" in args:
        pattern = args[args.index("-k") + 1]
    may_skip = None
    if "--only-skip" in args:
        may_skip = args[args.index("--only-skip") + 1].split(",")
    passed = failed = skipped = 0
    failures = []

    if "--no-unit" not in args and not pattern:
        r = subprocess.run([os.path.join(harness.BUILD, "unit")], capture_output=True, text=True)
        sys.stdout.write(r.stdout)
        sys.stderr.write(r.stderr)
        m = re.search(r"unit: (\d+) passed, (\d+) failed", r.stdout)
        if not m:
            failed += 1
            failures.append("unit (no summary, exit %d)" % r.returncode)
        else:
            passed += int(m.group(1))
            failed += int(m.group(2))
            if int(m.group(2)):
                failures.append("unit")

    here = os.path.dirname(os.path.abspath(__file__))
    for f in sorted(os.listdir(here)):
        if not (f.startswith("test_") and f.endswith(".py")):
            continue
        mod = importlib.import_module(f[:-3])
        for name in sorted(n for n in dir(mod) if n.startswith("test_")):
            full = "%s.%s" % (f[:-3], name)
            if pattern and pattern not in full:
                continue
            t0 = time.time()
            try:
                getattr(mod, name)()
            except harness.Skip as e:
                if may_skip is not None and full not in may_skip:
                    failed += 1
                    failures.append(full)
                    print("FAIL %s (skipped, and only %s may skip: %s)" % (full, ",".join(may_skip), e),
                          flush=True)
                    continue
                skipped += 1
                print("skip %s (%s)" % (full, e), flush=True)
                continue
            except Exception:
                failed += 1
                failures.append(full)
                print("FAIL %s (%.1f s)" % (full, time.time() - t0), flush=True)
                traceback.print_exc()
                continue
            passed += 1
            print("ok   %s (%.1f s)" % (full, time.time() - t0), flush=True)

    if failures:
        print("failed: " + ", ".join(failures))
    print("%d passed, %d failed, %d skipped" % (passed, failed, skipped))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
