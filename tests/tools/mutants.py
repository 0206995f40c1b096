#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""make check-mutants: break each mechanism the tests claim, one at a time,
and check that a test notices.

For each mutant of MUTANTS: one line of the sources, found by a pattern
that must occur exactly once in the files its glob names (daemon/*.c, not
one file and line: files are split and lines move), is changed in a
throwaway copy of the tree (BUILD/mutants/tree: the working tree's files
and a copy of BUILD, so make rebuilds the changed file alone; and, as
the copy is no git checkout, their list in MANIFEST), the copy
is built, and the tests that claim the mechanism are run there, one after
another, until one fails. A mutant is "killed" when a test failed,
"survived" when every one passed (or skipped: a skip proves nothing).
A pattern that matches no line, or more than one, is an error, as is a
test name that matches no test: the list is stale.

Not part of make test: each mutant is a rebuild and some of the slow
tests. Ends with a table; exits 1 if any mutant survived or erred.

usage: tests/tools/mutants.py [--build DIR] [--only NAME,...] [--list] [--baseline]
  --only      run these mutants alone (one at a time while developing)
  --baseline  also run each mutant's tests on the unchanged copy first
              (a test that fails there proves nothing about the mutant)
"""
import argparse
import glob
import os
import re
import shutil
import subprocess
import sys
import time
from typing import List, NamedTuple, Optional, Tuple

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


class Mutant(NamedTuple):
    name: str
    mechanism: str
    files: str          # glob, relative to the tree
    find: str           # an exact substring: exactly one line holds it
    replace: str        # what that substring becomes in that line
    tests: Tuple[str, ...]   # "unit:NAME" (build/unit NAME) or a tests/run.py -k substring


MUTANTS: List[Mutant] = [
    # The slot hash's tag rule (daemon/cluster.c).
    Mutant("tag-empty-counts", "slot hash tag rule: an empty {} is a tag", "daemon/*.c",
           "if (close && close > open + 1)", "if (close)",
           ("unit:cluster_slot_vectors",)),
    Mutant("tag-close-before-open", "slot hash tag rule: a '}' before the '{' closes it",
           "daemon/*.c", "close = memchr(open + 1, '}', rest);", "close = memchr(k, '}', len);",
           ("unit:cluster_slot_vectors",)),
    Mutant("tag-unmatched-brace", "slot hash tag rule: an unmatched '{' opens a tag",
           "daemon/*.c", "close = memchr(open + 1, '}', rest);",
           "close = memchr(open + 1, '}', rest); "
           "if (!close && rest) return crc16(open + 1, rest) & (CLUSTER_SLOTS - 1);",
           ("unit:cluster_slot_vectors",)),
    # Silence detection (daemon/l2.c's command timer).
    Mutant("silence-never-detected", "silence detection: a silent connection counts as moving",
           "daemon/*.c", "(progress_of(cmd->ac) != cmd->seen || (q >= 0 && q < cmd->outq) ||",
           "(1 || (q >= 0 && q < cmd->outq) ||",
           ("test_l2_silence.test_l2_throttled_transfer_outlives_the_timeout_stall_does_not",)),
    Mutant("silence-progress-unseen", "silence detection: bytes moving are not seen",
           "daemon/*.c", "(progress_of(cmd->ac) != cmd->seen || (q >= 0 && q < cmd->outq) ||",
           "(0 ||",
           ("test_l2_silence.test_l2_throttled_transfer_outlives_the_timeout_stall_does_not",
            "test_l2_chunks.test_l2_values_of_1_to_100_mb")),
    Mutant("silence-no-cap", "silence detection: no cap on a command whose bytes trickle",
           "daemon/*.c", "int too_long = now - cmd->sent_us > max_ms * 1000;", "int too_long = 0;",
           ("test_l2_silence.test_l2_a_trickle_never_silent_for_the_timeout_still_ends",)),
    # The autostart lock (client/autostart.c).
    Mutant("autostart-no-lock", "autostart lock: every client starts a daemon", "client/*.c",
           "flock(lock, LOCK_EX | LOCK_NB) < 0;)", "0;)",
           ("test_idle.test_fronts_start_one_daemon",)),
    Mutant("autostart-no-recheck", "autostart lock: the lock's waiter does not look again",
           "client/*.c", "if (answers(socket)) {          /* another client started it meanwhile */",
           "if (0) {",
           ("test_idle.test_fronts_start_one_daemon",)),
    # The breaker (daemon/l2.c).
    Mutant("breaker-never-opens", "breaker: failures never open it", "daemon/*.c",
           "else if (++nd->failures >= L2_TRIP)", "else if (++nd->failures >= L2_TRIP * 1000)",
           ("test_l2_silence.test_l2_throttled_transfer_outlives_the_timeout_stall_does_not",
            "test_l2_live.test_l2_redis_stopped_breaker_and_recovery")),
    Mutant("breaker-open-admits", "breaker: an open breaker lets requests through", "daemon/*.c",
           "if (now_us() < nd->open_until_us)", "if (0)",
           ("test_l2_silence.test_l2_throttled_transfer_outlives_the_timeout_stall_does_not",
            "test_l2_live.test_l2_redis_stopped_breaker_and_recovery")),
    # Chunk verification (daemon/l2.c).
    Mutant("chunk-length-unchecked", "chunk verification: a chunk's length", "daemon/*.c",
           "else if (r->len != len)", "else if (0)",
           ("test_l2_chunks.test_l2_tampered_missing_or_foreign",)),
    Mutant("chunk-hmac-unchecked", "chunk verification: the assembled value's HMAC",
           "daemon/*.c", "CRYPTO_memcmp(want, p + len, L2_MAC_LEN))", "0)",
           ("test_l2_chunks.test_l2_tampered_missing_or_foreign",)),
    Mutant("chunk-manifest-unbounded", "chunk verification: a manifest past l2-max-value",
           "daemon/*.c", "if (*total > (uint64_t)max_value)", "if (0)",
           ("test_l2_chunks.test_l2_a_manifest_cannot_make_a_reader_fetch_past",)),
    Mutant("chunk-writer-unbounded", "chunk verification: a writer past l2-max-value",
           "daemon/*.c", "if (!total || (int64_t)total > l2->conf->max_value) {", "if (!total) {",
           ("test_l2_chunks.test_l2_a_manifest_cannot_make_a_reader_fetch_past",)),
    # The artifact scope check (daemon/artifact.c).
    Mutant("scope-everyone", "scope check: every uid in one scope", "daemon/*.c",
           "return (int64_t)c->uid;", "return ARTIFACT_SCOPE_ALL;",
           ("test_artifact.test_a_second_uid_never_sees",
            "test_artifact.test_redis_carries_artifacts_within_their_scope")),
    Mutant("scope-no-groups", "scope check: artifact-groups ignored", "daemon/*.c",
           "if ((i < 0 ? c->gid : c->groups[i]) == a->groups[g])", "if (0)",
           ("test_artifact.test_a_group_shares_one_scope",)),
    # Whose entries ls, show and explain describe (daemon/store.c, manage.c).
    Mutant("view-everyone", "per-identity view: every entry shown to everyone", "daemon/*.c",
           '" AND (?8 IS NULL OR EXISTS (SELECT 1 FROM entry_users u"',
           '" AND (?8 IS NULL OR 1 OR EXISTS (SELECT 1 FROM entry_users u"',
           ("test_tenants.test_a_tenant_learns_nothing_of_anothers_entries",
            "test_manage.test_a_uid_sees_only_its_own_entries_on_the_main_socket")),
    Mutant("view-no-hits", "per-identity view: a hit not noted", "daemon/*.c",
           "store_note_user(s->store, k->hash, conn_tenant(c));", "(void)0;",
           ("test_manage.test_an_entry_a_uid_is_answered_with_is_its_own_too",)),
    # Group commit of artifact puts (daemon/put_batch.c).
    Mutant("put-batch-off", "group commit: each put its own commit", "daemon/*.c",
           "int together = n > 1 && store_batch_begin(b->store) == 0;", "int together = 0;",
           ("test_artifact.test_concurrent_puts_share_a_commit",
            "test_artifact.test_a_failing_put_in_a_batch")),
    # The lease hand-off (daemon/artifact.c, fleet.c, flight.c).
    Mutant("handoff-artifact", "lease hand-off: a node's lease ends, no waiter takes it",
           "daemon/*.c", "for (pp = &s->waiters; *pp && !(*pp)->want_lease; pp = &(*pp)->next)",
           "for (pp = &s->waiters; *pp; pp = &(*pp)->next)",
           ("test_artifact.test_a_producer_killed_hands_the_lease_on",
            "test_artifact.test_release_and_expiry")),
    Mutant("handoff-fleet", "lease hand-off: a fleet lease given up is left to lapse",
           "daemon/*.c", "if (w->holding && !published && *w->f->l2 == w->l2)", "if (0)",
           ("test_fleet.test_a_release_hands_the_fleet_lease_on",)),
    Mutant("handoff-flight", "lease hand-off: a flight that published nothing keeps its lease",
           "daemon/*.c", "fleet_end(f->fw, published);", "fleet_end(f->fw, 1);",
           ("test_fleet.test_a_failed_compile_hands_the_fleet_lease_on",)),
    # The sdist's contents (mk/wheel_backend.py): files the build does not
    # need left out, which only the member check can see.
    Mutant("sdist-drops-tests", "sdist: the tree's tests left out", "mk/*.py",
           "return [f for f in files if os.path.isfile(os.path.join(ROOT, f))]",
           "return [f for f in files if os.path.isfile(os.path.join(ROOT, f)) "
           "and not f.startswith(\"tests/\")]",
           ("test_wheel.test_wheel_sdist_holds_the_tree",)),
]


def sh(cmd: List[str], cwd: str, log, timeout: Optional[float] = None, env=None) -> int:
    log.write("$ %s\n" % " ".join(cmd))
    log.flush()
    try:
        return subprocess.run(cmd, cwd=cwd, stdout=log, stderr=subprocess.STDOUT,
                              timeout=timeout, env=env).returncode
    except subprocess.TimeoutExpired:
        log.write("(timed out after %s s)\n" % timeout)
        return 124


def tree_files() -> List[str]:
    r = subprocess.run(["git", "-C", ROOT, "ls-files", "-z", "-co", "--exclude-standard"],
                       capture_output=True, check=True)
    return [f for f in r.stdout.decode().split("\0") if f and os.path.isfile(os.path.join(ROOT, f))]


def make_copy(build: str, tree: str):
    """The working tree's files and BUILD, timestamps kept (make then
    rebuilds nothing), into tree; what is there already is replaced."""
    shutil.rmtree(tree, ignore_errors=True)
    os.makedirs(tree)
    files = tree_files()
    for f in files:
        dst = os.path.join(tree, f)
        os.makedirs(os.path.dirname(dst), exist_ok=True)
        shutil.copy2(os.path.join(ROOT, f), dst)
    # The copy is no git checkout: its list of files, for the tests and
    # the sdist backend that need one, as an sdist (and make deb's copy)
    # carries it.
    with open(os.path.join(tree, "MANIFEST"), "w", encoding="utf-8") as f:
        f.writelines(x + "\n" for x in sorted(files) if x != "MANIFEST")
    shutil.copytree(build, os.path.join(tree, "build"), symlinks=True,
                    ignore=shutil.ignore_patterns("mutants", "wheel-test", "deb", "bench"))


def locate(tree: str, m: Mutant) -> Tuple[str, int]:
    """The one (file, line index) whose line holds m.find, or ValueError."""
    hits = []
    for path in sorted(glob.glob(os.path.join(tree, m.files))):
        with open(path, encoding="utf-8") as f:
            for i, line in enumerate(f):
                if m.find in line:
                    hits.append((path, i))
    if len(hits) != 1:
        raise ValueError("%r: %d lines of %s hold it (%s)" % (
            m.find, len(hits), m.files, ", ".join("%s:%d" % (os.path.relpath(p, tree), i + 1)
                                                 for p, i in hits)))
    return hits[0]


def run_tests(tree: str, tests, log) -> Tuple[str, str]:
    """("failed", test) at the first test that fails, else ("passed", "")
    or ("skipped", test) if one skipped; ("error", why) if a name matches
    nothing."""
    env = dict(os.environ, PTXCACHE_BUILD="build", PYTHONDONTWRITEBYTECODE="1")
    skipped = ""
    for t in tests:
        if t.startswith("unit:"):
            name = t[len("unit:"):]
            log.write("$ build/unit %s\n" % name)
            log.flush()
            r = subprocess.run([os.path.join(tree, "build", "unit"), name], cwd=tree,
                               capture_output=True, text=True, timeout=300)
            log.write(r.stdout + r.stderr)
            m = re.search(r"unit: (\d+) passed, (\d+) failed", r.stdout)
            if not m:
                return "failed", t                  # crashed: noticed all the same
            if int(m.group(1)) + int(m.group(2)) == 0:
                return "error", "%s matches no unit test" % t
            if int(m.group(2)) or r.returncode:
                return "failed", t
            continue
        log.write("$ tests/run.py -k %s\n" % t)
        log.flush()
        try:
            r = subprocess.run([sys.executable, "tests/run.py", "-k", t], cwd=tree, env=env,
                               capture_output=True, text=True, timeout=1800)
            out = r.stdout + r.stderr
            rc = r.returncode
        except subprocess.TimeoutExpired as e:
            out = "%s%s\n(timed out)\n" % (e.stdout or "", e.stderr or "")
            rc = 124
        log.write(out if isinstance(out, str) else out.decode(errors="replace"))
        m = re.search(r"(\d+) passed, (\d+) failed, (\d+) skipped", out if isinstance(out, str)
                      else out.decode(errors="replace"))
        if rc == 124 or (m and int(m.group(2))) or not m:
            return "failed", t
        if int(m.group(1)) + int(m.group(3)) == 0:
            return "error", "%s matches no test" % t
        if int(m.group(3)):
            skipped = skipped or t
    return ("skipped", skipped) if skipped else ("passed", "")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--only", default="")
    ap.add_argument("--list", action="store_true")
    ap.add_argument("--baseline", action="store_true")
    a = ap.parse_args()
    chosen = [m for m in MUTANTS if not a.only or m.name in a.only.split(",")]
    if a.list or not chosen:
        for m in MUTANTS:
            print("%-26s %s" % (m.name, m.mechanism))
        return 0 if a.list else 2
    build = os.path.abspath(a.build)
    if not os.path.exists(os.path.join(build, "ptxcached")):
        print("mutants: %s holds no build (make all corpus first)" % build, file=sys.stderr)
        return 2
    work = os.path.join(build, "mutants")
    tree = os.path.join(work, "tree")
    os.makedirs(work, exist_ok=True)
    make_copy(build, tree)
    jobs = os.environ.get("MUTANT_JOBS", "2")
    results = []
    for m in chosen:
        t0 = time.time()
        with open(os.path.join(work, m.name + ".log"), "w") as log:
            verdict, detail = run_one(tree, m, log, jobs, a.baseline)
        results.append((m, verdict, detail, time.time() - t0))
        print("%-9s %-26s %s%s (%.0f s)" % (verdict, m.name, m.mechanism,
                                            ": " + detail if detail else "", time.time() - t0),
              flush=True)
    print()
    print("| mutant | mechanism | result | first test that failed |")
    print("|---|---|---|---|")
    for m, verdict, detail, took in results:
        print("| %s | %s | %s | %s |" % (m.name, m.mechanism, verdict, detail))
    bad = [m.name for m, v, _, _ in results if v != "killed"]
    print("\n%d mutants, %d killed, %d not: %s (logs in %s)" % (
        len(results), len(results) - len(bad), len(bad), ", ".join(bad) or "none", work))
    return 1 if bad else 0


def run_one(tree: str, m: Mutant, log, jobs: str, baseline: bool) -> Tuple[str, str]:
    try:
        path, idx = locate(tree, m)
    except ValueError as e:
        return "error", str(e)
    with open(path, encoding="utf-8") as f:
        lines = f.readlines()
    original = list(lines)
    if lines[idx].count(m.find) != 1:
        return "error", "%r twice in one line" % m.find
    if baseline:
        if sh(["make", "-j" + jobs, "all"], tree, log) != 0:
            return "error", "the unchanged copy does not build"
        verdict, t = run_tests(tree, m.tests, log)
        if verdict != "passed":
            return "error", "unchanged, %s %s" % (verdict, t)
    lines[idx] = lines[idx].replace(m.find, m.replace)
    log.write("mutant %s: %s:%d\n- %s+ %s" % (m.name, os.path.relpath(path, tree), idx + 1,
                                              original[idx], lines[idx]))
    try:
        with open(path, "w", encoding="utf-8") as f:
            f.writelines(lines)
        if sh(["make", "-j" + jobs, "all"], tree, log) != 0:
            return "error", "the mutant does not build (see its log)"
        verdict, t = run_tests(tree, m.tests, log)
    finally:
        # Back as it was, newer than the mutant's objects: the next build
        # rebuilds this file again.
        with open(path, "w", encoding="utf-8") as f:
            f.writelines(original)
    if verdict == "failed":
        return "killed", t
    if verdict == "error":
        return "error", t
    return "survived", "%s skipped" % t if verdict == "skipped" else ""


if __name__ == "__main__":
    sys.exit(main())
