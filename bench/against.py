#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""bench/against.py: this tree's daemon against an earlier commit's, side by side.

`make bench-against BASE=<commit>` (and the end of `make bench`) runs this.
The earlier commit is checked out in a git worktree of its own under
build/against/<sha> (`git worktree add --detach`) and its daemon built
there (`make -j2 build/ptxcached`), once: a later run reuses it. Then the
same bench binary (this tree's client library) runs the same sections
(`bench --only start,miss,hit`; `bench --large`, the large values with
their floors; bench/large.py's 1, 8 and 64 MB through a single Redis and
a cluster, with each side's own build/l2drive) with one daemon and then
the other, the order swapped every round (base, now; now, base; ...) so
that both see the same drift of a shared machine. Each figure is the
median of its rounds; the large values' are also given over the floor
measured in the same run (large_8mib_py_get_over_read, ...).

build/bench/against.json holds every figure of results.json that both
daemons measured, under its own name, as {"base": median, "now": median,
"ratio": now / base, "base_runs": [...], "now_runs": [...]}, and "meta":
the two commits, the rounds, the sections. A table goes to stdout, with
the goals of the hit path beside their figures. A ratio above 1 is this
tree slower (or bigger) than the base; on a busy machine, wall-time
ratios within about 5% are noise.

With no --base: the newest tag named bench-* reachable from HEAD, else the
last commit that changed the README's benchmark figures (its table rows).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# Figures of results.json that are settings or counts, not measurements.
NOT_FIGURES = {"corpus_kernels", "distinct_kernels", "quick", "workers", "notes", "per_kernel"}

# The large values' figures over their floors, measured in the same run.
LARGE_RATIOS = {
    "put_over_write_fsync": ("put_ms", "write_fsync_ms"),
    "py_put_over_write_fsync": ("py_put_ms", "write_fsync_ms"),
    "c_get_over_read": ("c_get_ms", "c_read_ms"),
    "py_get_over_read": ("py_get_ms", "py_read_ms"),
    "get_over_raw_get": ("get_s", "raw_get_s"),
}

# The goals the table marks: (figure, which side, at most, what it says).
GOALS = [
    ("steady_request_ms", "ratio", 1.02, "steady miss against the base"),
    ("miss_ptx_ms", "ratio", 1.02, "the corpus's misses against the base"),
    ("hit_p50_over_floor", "now", 1.3, "hit p50 over the socket floor"),
    ("first_over_steady", "now", 1.1, "first request after start over steady"),
]


def git(*args: str) -> str:
    return subprocess.run(["git", "-C", str(ROOT), *args], check=True,
                          capture_output=True, text=True).stdout.strip()


def default_base() -> str:
    """The newest bench-* tag reachable from HEAD, else the last commit that
    changed a row of the README's benchmark table."""
    try:
        return git("describe", "--tags", "--abbrev=0", "--match", "bench-*")
    except subprocess.CalledProcessError:
        pass
    sha = git("log", "-1", "--format=%H", r"-G^\| (hit p50|first request|misses through)",
              "--", "README.md")
    if not sha:
        sys.exit("against: no bench-* tag and no commit changed the README's figures; "
                 "give --base")
    return sha


def build_base(rev: str, build: Path, jobs: int, tier: bool) -> tuple[str, Path]:
    """The base's daemon (and its l2drive, for the tier section), built in
    build/against/<sha> (reused if there)."""
    try:
        sha = git("rev-parse", "--verify", rev + "^{commit}")
    except subprocess.CalledProcessError:
        sys.exit(f"against: '{rev}' is not a commit here")
    tree = (build / "against" / sha).resolve()
    daemon = tree / "build" / "ptxcached"
    if not (tree / ".git").exists():
        git("worktree", "prune")
        tree.parent.mkdir(parents=True, exist_ok=True)
        print(f"against: checking out {sha[:10]} in {tree}", file=sys.stderr)
        git("worktree", "add", "--detach", str(tree), sha)
    targets = ["build/ptxcached"] + (["build/l2drive"] if tier else [])
    print(f"against: building {sha[:10]}'s {' and '.join(targets)} (make -j{jobs})",
          file=sys.stderr)
    r = subprocess.run(["make", "-C", str(tree), f"-j{jobs}", "--no-print-directory"] + targets,
                       stdout=subprocess.DEVNULL)
    if r.returncode != 0 or not all((tree / t).exists() for t in targets):
        sys.exit(f"against: building {sha[:10]} failed (see make -C {tree} {' '.join(targets)})")
    return sha, daemon


def run(cmd: list[str], must: bool = True) -> bool:
    """Run cmd; if it fails, stop (must) or say so and go on (a base too
    old for a section measures none of its figures)."""
    r = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    if r.returncode != 0:
        tail = "\n".join(r.stderr.strip().splitlines()[-3:])
        if must:
            sys.exit(f"against: {' '.join(cmd)} failed:\n{r.stderr}")
        print(f"against: {' '.join(cmd)} failed; its figures are left out:\n{tail}",
              file=sys.stderr)
    return r.returncode == 0


def large_figures(rows: list[dict], prefix: str) -> dict[str, float]:
    """bench --large's or bench/large.py's rows as figures: each measured
    value per size, and each beside the floor measured in the same run."""
    figs: dict[str, float] = {}
    for row in rows:
        size = row.get("mib", row.get("mb"))
        for k, v in row.items():
            if k not in ("mib", "mb") and isinstance(v, (int, float)) and not isinstance(v, bool):
                figs[f"{prefix}_{size}mib_{k}"] = float(v)
        for name, (num, den) in LARGE_RATIOS.items():
            if row.get(num) and row.get(den):
                figs[f"{prefix}_{size}mib_{name}"] = row[num] / row[den]
    return figs


def one_run(bench: Path, daemon: Path, corpus: Path, sections: str, quick: bool,
            workers: int, out: Path) -> dict[str, float]:
    """One run of the sections with one side's daemon (and, for "tier",
    that side's build of l2drive, beside the daemon)."""
    out.mkdir(parents=True, exist_ok=True)
    wanted = sections.split(",")
    corpus_sections = ",".join(x for x in wanted if x not in ("large", "tier"))
    figs: dict[str, float] = {}
    if corpus_sections:
        cmd = [str(bench), "--only", corpus_sections, "--daemon", str(daemon),
               "--corpus", str(corpus), "--out", str(out), "--workers", str(workers)]
        run(cmd + (["--quick"] if quick else []))
        res = json.loads((out / "results.json").read_text())
        figs.update({k: float(v) for k, v in res.items()
                     if k not in NOT_FIGURES and isinstance(v, (int, float))
                     and not isinstance(v, bool)})
    if "large" in wanted and run([str(bench), "--large", "--daemon", str(daemon), "--out",
                                  str(out)] + (["--quick"] if quick else []), must=False):
        figs.update(large_figures(json.loads((out / "large.json").read_text()), "large"))
    if "tier" in wanted and run([sys.executable, str(ROOT / "bench" / "large.py"), "--build",
                                 str(daemon.parent), "--out", str(out / "tier"), "--rounds", "1",
                                 "--sizes", "1,8,64"], must=False):
        path = out / "tier" / "large.json"       # not there: no redis-server here
        res = json.loads(path.read_text()) if path.exists() else {}
        for where in ("single", "cluster"):
            figs.update(large_figures(res.get(where, []), f"tier_{where}"))
    return figs


def fmt(v: float | None) -> str:
    if v is None:
        return "null"
    return f"{v:.0f}" if abs(v) >= 100 else f"{v:.3g}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--base", help="the commit or tag to compare with (default: see above)")
    ap.add_argument("--build", default="build", help="this tree's build directory")
    ap.add_argument("--rounds", type=int, default=3, help="runs of each daemon (at least 3)")
    ap.add_argument("--sections", default="start,miss,hit,large,tier",
                    help="bench --only's list, and large (bench --large), tier (bench/large.py)")
    ap.add_argument("--full", action="store_true", help="the whole corpus, not --quick's 10")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--jobs", type=int, default=2, help="make -j for the base's build")
    ap.add_argument("--out", help="where against.json goes (default BUILD/bench)")
    a = ap.parse_args()
    if a.rounds < 3:
        sys.exit("against: --rounds must be at least 3 (medians of alternating runs)")

    build = (ROOT / a.build).resolve() if not os.path.isabs(a.build) else Path(a.build)
    bench, now_daemon = build / "bench" / "bench", build / "ptxcached"
    corpus = build / "corpus" / "triton"
    for p in (bench, now_daemon, corpus):
        if not p.exists():
            sys.exit(f"against: {p} is missing (make all corpus {a.build}/bench/bench)")
    out = Path(a.out) if a.out else build / "bench"
    out.mkdir(parents=True, exist_ok=True)

    base_rev = a.base or default_base()
    base_sha, base_daemon = build_base(base_rev, build, a.jobs, "tier" in a.sections.split(","))
    now_sha = git("rev-parse", "HEAD")
    dirty = bool(git("status", "--porcelain", "--untracked-files=no"))

    runs: dict[str, list[dict[str, float]]] = {"base": [], "now": []}
    daemons = {"base": base_daemon, "now": now_daemon}
    with tempfile.TemporaryDirectory(prefix="ptxcache-against-") as tmp:
        for r in range(a.rounds):
            order = ("base", "now") if r % 2 == 0 else ("now", "base")
            for side in order:
                print(f"against: round {r + 1}/{a.rounds}: {side}", file=sys.stderr)
                runs[side].append(one_run(bench, daemons[side], corpus, a.sections,
                                          not a.full, a.workers,
                                          Path(tmp) / f"{side}-{r}"))

    names = [k for k in runs["now"][0] if all(k in x for x in runs["base"] + runs["now"])]
    result: dict[str, object] = {}
    for k in names:
        b = [x[k] for x in runs["base"]]
        n = [x[k] for x in runs["now"]]
        mb, mn = statistics.median(b), statistics.median(n)
        result[k] = {"base": mb, "now": mn, "ratio": mn / mb if mb else None,
                     "base_runs": b, "now_runs": n}
    result["meta"] = {"base": base_rev, "base_commit": base_sha, "now_commit": now_sha,
                      "now_dirty": dirty, "rounds": a.rounds, "sections": a.sections,
                      "quick": not a.full, "workers": a.workers}
    path = out / "against.json"
    path.write_text(json.dumps(result, indent=2) + "\n")

    print(f"\nptxcache bench against {base_rev} ({base_sha[:10]}): medians of {a.rounds} "
          f"alternating runs each{' (QUICK subset)' if not a.full else ''}\n")
    print(f"  {'figure':<28} {'base':>10} {'now':>10} {'now/base':>9}")
    for k in names:
        f = result[k]
        assert isinstance(f, dict)
        ratio = f["ratio"]
        print(f"  {k:<28} {fmt(f['base']):>10} {fmt(f['now']):>10} "
              f"{(f'{ratio:.3f}x' if ratio is not None else 'null'):>9}")
    print()
    for k, side, limit, what in GOALS:
        f = result.get(k)
        if not isinstance(f, dict) or f[side] is None:
            continue
        v = f[side]
        print(f"  goal: {what}: {v:.3f}x (at most {limit}x): "
              f"{'met' if v <= limit else 'missed'}")
    print(f"\n  {path} written")


if __name__ == "__main__":
    main()
