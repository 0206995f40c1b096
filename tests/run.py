#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Runs every ptxcache test: the C unit tests (build/unit), then each
test_* function of tests/test_*.py against the real daemon. Ends with one
line "N passed, N failed, N skipped" and exits non-zero on any failure.

usage: tests/run.py [-k SUBSTRING] [--no-unit] [--only-skip NAME,...]
                    [--jobs N] [--files test_a,test_b] [--times FILE]

Files run in parallel, one process each, --jobs at a time (default: the
machine's cores), longest first by the last run's times; a file's output
is printed whole when it ends. Markers at a file's top say otherwise:
SERIAL = "why": it touches the whole machine (installs packages) or
measures time: it runs alone, after the others; GROUP = "name": it shares
something with the other files of that group (a build tree): they run one
after another. Under sanitizers
(PTXCACHE_SANITIZED, make check-asan) a file that says
NOT_UNDER_SANITIZERS = "why" is left out: it drives no C code of ours, or
only code the other files drive the same way.

Each test's time goes to --times (default BUILD/test-times.tsv: the
test's name, a tab, its seconds; a test whose last run failed or skipped
is not there), and the ten slowest are printed at the end.

--only-skip: a skip of any test not named there counts as a failure (CI runs
a lone clone so: only the LLVM lit suite, which lives outside the
repository, may skip there).
--files: these files alone (names without .py; "unit" for build/unit).
"""
import argparse
import ast
import importlib
import os
import re
import signal
import subprocess
import sys
import threading
import time
import traceback
from concurrent.futures import ThreadPoolExecutor
from typing import Dict, List, NamedTuple, Optional, Tuple

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import harness  # noqa: E402

# The longest a test file may run: the static and cross builds of a fresh
# clone take minutes, under sanitizers more.
FILE_TIMEOUT_S = 1800
RESULT = re.compile(r"^(ok  |FAIL|skip) (\S+)(?: \((\d+\.\d) s\))?", re.M)


class TestFile(NamedTuple):
    module: str                 # "test_large"
    tests: List[str]            # its test_* functions, sorted
    serial: Optional[str]       # why it runs alone, or None
    group: Optional[str]        # the files it runs one after another with, or None
    unsanitized: Optional[str]  # why sanitizers leave it out, or None


def read_file(module: str) -> TestFile:
    """A test file's tests and markers, read without importing it."""
    with open(os.path.join(HERE, module + ".py"), encoding="utf-8") as f:
        body = ast.parse(f.read()).body
    marks = {}
    for node in body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and \
                isinstance(node.targets[0], ast.Name) and isinstance(node.value, ast.Constant):
            marks[node.targets[0].id] = node.value.value
    tests = sorted(n.name for n in body
                   if isinstance(n, ast.FunctionDef) and n.name.startswith("test_"))
    return TestFile(module, tests, marks.get("SERIAL"), marks.get("GROUP"),
                    marks.get("NOT_UNDER_SANITIZERS"))


def run_module(module: str, pattern: Optional[str], may_skip: Optional[List[str]]) -> int:
    """The tests of one file, one after another, in this process: a line
    each ("ok   NAME (T s)", "FAIL NAME (T s)" and its traceback, "skip
    NAME (T s): why"), then "file NAME: done"."""
    mod = importlib.import_module(module)
    failed = 0
    for name in sorted(n for n in dir(mod) if n.startswith("test_")):
        full = "%s.%s" % (module, name)
        if pattern and pattern not in full:
            continue
        t0 = time.time()
        try:
            getattr(mod, name)()
        except harness.Skip as e:
            took = time.time() - t0
            if may_skip is not None and full not in may_skip:
                failed += 1
                print("FAIL %s (%.1f s): skipped, and only %s may skip: %s"
                      % (full, took, ",".join(may_skip), e), flush=True)
            else:
                print("skip %s (%.1f s): %s" % (full, took, e), flush=True)
            continue
        except Exception:
            failed += 1
            print("FAIL %s (%.1f s)" % (full, time.time() - t0), flush=True)
            traceback.print_exc(file=sys.stdout)
            sys.stdout.flush()
            continue
        print("ok   %s (%.1f s)" % (full, time.time() - t0), flush=True)
    print("file %s: done" % module, flush=True)
    return 1 if failed else 0


class Tally:
    """The results of every job, printed a job at a time."""

    def __init__(self):
        self.lock = threading.Lock()
        self.counts = {"ok  ": 0, "FAIL": 0, "skip": 0}
        self.failures: List[str] = []
        self.times: Dict[str, float] = {}      # the tests that passed
        self.not_passed: List[str] = []

    def job_ended(self, label: str, out: str, complete: bool, rc: int, took: float):
        with self.lock:
            for verdict, name, secs in RESULT.findall(out):
                self.counts[verdict] += 1
                if verdict == "FAIL":
                    self.failures.append(name)
                if verdict == "ok  " and secs:
                    self.times[name] = float(secs)
                elif verdict != "ok  ":
                    self.not_passed.append(name)
            if not complete:
                # It crashed or was killed before its last line: the tests
                # that did not report are lost, so the job fails.
                self.counts["FAIL"] += 1
                self.failures.append(label)
                out += "FAIL %s (%.1f s): ended without its last line (exit %d)\n" % (label, took, rc)
            sys.stdout.write(out)
            sys.stdout.flush()


def run_unit(tally: Tally, pattern: Optional[str]):
    t0 = time.time()
    r = subprocess.run([os.path.join(harness.BUILD, "unit")] + ([pattern] if pattern else []),
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, errors="replace")
    # build/unit's names are its own: "unit:" before each, as the mutants name them.
    out = re.sub(r"^(ok  |FAIL) ", r"\1 unit:", r.stdout, flags=re.M)
    m = re.search(r"^unit: (\d+) passed, (\d+) failed", out, re.M)
    tally.job_ended("unit", out, bool(m) and r.returncode in (0, 1), r.returncode, time.time() - t0)


def run_files(tally: Tally, tfs: List[TestFile], pattern: Optional[str],
              may_skip: Optional[List[str]]):
    for tf in tfs:
        run_file(tally, tf, pattern, may_skip)


def run_file(tally: Tally, tf: TestFile, pattern: Optional[str], may_skip: Optional[List[str]]):
    t0 = time.time()
    cmd = [sys.executable, os.path.abspath(__file__), "--module", tf.module]
    if pattern:
        cmd += ["-k", pattern]
    if may_skip is not None:
        cmd += ["--only-skip", ",".join(may_skip)]
    # A session of its own: a file that outlives FILE_TIMEOUT_S is killed
    # with everything it started (its daemons, its Redis servers).
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                         text=True, errors="replace", start_new_session=True)
    try:
        out, _ = p.communicate(timeout=FILE_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        out, _ = p.communicate()
        out += "(%s killed after %d s)\n" % (tf.module, FILE_TIMEOUT_S)
    complete = "file %s: done" % tf.module in out
    tally.job_ended(tf.module, out, complete, p.returncode, time.time() - t0)


def last_times(path: str) -> Dict[str, float]:
    """{test name: seconds} of the last run, or {} where there was none."""
    times = {}
    try:
        with open(path, encoding="utf-8") as f:
            for line in f:
                name, _, secs = line.rstrip("\n").partition("\t")
                try:
                    times[name] = float(secs)
                except ValueError:
                    pass
    except OSError:
        pass
    return times


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("-k", dest="pattern")
    ap.add_argument("--no-unit", action="store_true")
    ap.add_argument("--only-skip")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--files")
    ap.add_argument("--times", default=os.path.join(harness.BUILD, "test-times.tsv"))
    ap.add_argument("--module", help=argparse.SUPPRESS)    # one file, in this process
    a = ap.parse_args()
    may_skip = a.only_skip.split(",") if a.only_skip is not None else None
    if a.module:
        return run_module(a.module, a.pattern, may_skip)

    chosen = [x for x in (a.files or "").split(",") if x]
    files = [read_file(f[:-3]) for f in sorted(os.listdir(HERE))
             if f.startswith("test_") and f.endswith(".py") and (not chosen or f[:-3] in chosen)]
    unknown = set(chosen) - {tf.module for tf in files} - {"unit"}
    if unknown:
        print("run.py: no test file %s" % ", ".join(sorted(unknown)), file=sys.stderr)
        return 2
    if harness.SANITIZED:
        for tf in files:
            if tf.unsanitized:
                print("left out under sanitizers: %s (%s)" % (tf.module, tf.unsanitized))
        files = [tf for tf in files if not tf.unsanitized]
    files = [tf for tf in files
             if any(not a.pattern or a.pattern in "%s.%s" % (tf.module, t) for t in tf.tests)]

    # Longest first, by the last run's times, so that the last to start
    # are short; a job with a test never timed (a fresh clone's every job)
    # goes before them, the largest files first.
    before = last_times(a.times)

    def cost(tfs: List[TestFile]) -> Tuple[bool, float]:
        names = ["%s.%s" % (tf.module, t) for tf in tfs for t in tf.tests]
        if all(n in before for n in names):
            return False, sum(before[n] for n in names)
        return True, sum(os.path.getsize(os.path.join(HERE, tf.module + ".py")) for tf in tfs)
    groups: Dict[str, List[TestFile]] = {}
    for tf in files:
        if not tf.serial:
            groups.setdefault(tf.group or tf.module, []).append(tf)
    parallel = sorted(groups.values(), key=cost, reverse=True)
    serial = [tf for tf in files if tf.serial]

    tally = Tally()
    started = time.time()
    with ThreadPoolExecutor(max(1, a.jobs)) as pool:
        jobs = []
        if not a.no_unit and (not chosen or "unit" in chosen) and \
                (not a.pattern or a.pattern.startswith("unit:")):
            jobs.append(pool.submit(run_unit, tally, a.pattern[len("unit:"):] if a.pattern else None))
        jobs += [pool.submit(run_files, tally, tfs, a.pattern, may_skip) for tfs in parallel]
        for j in jobs:
            j.result()
    for tf in serial:
        run_file(tally, tf, a.pattern, may_skip)

    # The times of the tests whose last run passed: this run's, over those
    # of the tests it did not run.
    times = dict(before)
    times.update(tally.times)
    for name in tally.not_passed:
        times.pop(name, None)
    try:
        with open(a.times + ".tmp", "w", encoding="utf-8") as f:
            f.writelines("%s\t%.1f\n" % kv for kv in sorted(times.items()))
        os.replace(a.times + ".tmp", a.times)
    except OSError as e:
        print("run.py: cannot write %s: %s" % (a.times, e), file=sys.stderr)
    slowest = sorted(tally.times.items(), key=lambda kv: -kv[1])[:10]
    if slowest:
        print("slowest (of %.0f s in all, %d jobs at once):" % (time.time() - started, a.jobs))
        for name, secs in slowest:
            print("  %6.1f s  %s" % (secs, name))
    if tally.failures:
        print("failed: " + ", ".join(tally.failures))
    print("%d passed, %d failed, %d skipped" % (tally.counts["ok  "], tally.counts["FAIL"],
                                                tally.counts["skip"]))
    return 1 if tally.counts["FAIL"] else 0


if __name__ == "__main__":
    sys.exit(main())
