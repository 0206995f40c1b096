#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""The floors of daemon/: which file calls which, read from the objects.

usage: tests/tools/layers.py [BUILD] [--dot]

For each daemon/*.c there is BUILD/obj/daemon/NAME.o; `nm` says which
global symbols each defines and which it uses. File A uses file B when A
uses a symbol B defines (a call, or a table or variable of B's). Prints
each file with the files it uses, then every cycle among them (two files
that use each other, or a longer loop), and exits 1 if there is one. The
floors then are the files in order: each uses only files on the floors
below it (ARCHITECTURE.md, "Floors"). A lower file reaches a higher one only
through a pointer the higher one gave it (a callback, an ops table), which
no object file shows as a use: that is the point.

tests/test_layers.py runs it against the build under test.
"""
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))


def symbols(obj):
    """(defined, used): the global symbols obj defines and those it uses."""
    r = subprocess.run(["nm", "-P", obj], capture_output=True, text=True, check=True)
    defined, used = set(), set()
    for line in r.stdout.splitlines():
        f = line.split()
        if len(f) < 2:
            continue
        name, kind = f[0], f[1]
        if kind == "U":
            used.add(name)
        elif kind.isupper() and kind not in ("N",):
            defined.add(name)
    return defined, used


def graph(build):
    """{file: set of files it uses}, over daemon/*.c (probe.c aside: it is
    built only into the test daemon, as build/obj/probe/)."""
    src = os.path.join(ROOT, "daemon")
    objdir = os.path.join(build, "obj", "daemon")
    names = sorted(f[:-2] for f in os.listdir(src) if f.endswith(".c") and f != "probe.c")
    owner, uses = {}, {}
    for n in names:
        obj = os.path.join(objdir, n + ".o")
        if not os.path.exists(obj):
            raise FileNotFoundError(obj)
        d, u = symbols(obj)
        for s in d:
            owner[s] = n
        uses[n] = u
    g = {}
    for n in names:
        g[n] = {owner[s] for s in uses[n] if s in owner and owner[s] != n}
    return g


def cycles(g):
    """The strongly connected components of more than one file (Tarjan)."""
    index, low, on, stack, out = {}, {}, set(), [], []
    counter = [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(g[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(g):
        if v not in index:
            visit(v)
    return out


def floors(g):
    """Files by floor: 0 uses nothing of daemon/, n uses floors below n."""
    level = {}

    def lvl(v, seen=()):
        if v in level:
            return level[v]
        if v in seen:
            return 0
        level[v] = 1 + max([lvl(w, seen + (v,)) for w in g[v]], default=-1)
        return level[v]

    for v in g:
        lvl(v)
    by = {}
    for v, n in level.items():
        by.setdefault(n, []).append(v)
    return [sorted(by[n]) for n in sorted(by)]


def main():
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    build = os.path.join(ROOT, args[0] if args else os.environ.get("PTXCACHE_BUILD", "build"))
    g = graph(build)
    if "--dot" in sys.argv:
        print("digraph daemon {")
        for a in sorted(g):
            for b in sorted(g[a]):
                print('  "%s" -> "%s";' % (a, b))
        print("}")
        return 0
    for a in sorted(g):
        print("%-12s uses %s" % (a + ".c", ", ".join(sorted(b + ".c" for b in g[a])) or "-"))
    bad = cycles(g)
    for c in bad:
        loop = [x + ".c" for x in c]
        print("CYCLE: %s" % " <-> ".join(loop))
        for a in c:
            for b in sorted(g[a] & set(c)):
                print("  %s uses %s" % (a + ".c", b + ".c"))
    if not bad:
        print("floors, top first:")
        for n, fl in reversed(list(enumerate(floors(g)))):
            print("  %d: %s" % (n, " ".join(x + ".c" for x in fl)))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
