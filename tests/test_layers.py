# SPDX-License-Identifier: Apache-2.0
"""The floors of daemon/ (ARCHITECTURE.md, "Floors"): no two files call
each other, directly or around a loop. tests/tools/layers.py derives which
file uses which from the objects of the build under test (nm: the file
that defines a symbol, the files that use it) and finds the cycles; a
lower floor reaches a higher one only through a pointer it was given (the
server's on_frame and on_quiet, the close hooks, a flight's waiter_ops)."""
import os
import re
import shutil
import sys

from harness import BUILD, ROOT

sys.path.insert(0, os.path.join(ROOT, "tests", "tools"))
import layers  # noqa: E402

# tests/run.py: left out of make check-asan.
NOT_UNDER_SANITIZERS = "the objects' symbols read with nm: no C code runs"


def graph():
    """The graph of the build under test. No nm (binutils, which the build
    itself needs) or an object of a daemon/*.c missing is a failure, not a
    skip: a source file the Makefile does not build, or a build that did
    not finish, would otherwise pass for floors that hold."""
    assert shutil.which("nm"), "no nm (binutils): the floors cannot be read"
    try:
        return layers.graph(BUILD)
    except FileNotFoundError as e:
        raise AssertionError("not built: %s (every daemon/*.c is built, make all)" % e)


def test_no_file_of_daemon_calls_back_up():
    g = graph()
    assert len(g) > 20, sorted(g)
    bad = layers.cycles(g)
    detail = []
    for c in bad:
        for a in c:
            detail += ["%s.c uses %s.c" % (a, b) for b in sorted(g[a] & set(c))]
    assert not bad, "cycles among daemon/*.c: %s (%s)" % (bad, "; ".join(detail))


def test_the_floors_are_as_drawn():
    g = graph()
    # The connection room knows no request family, no flight, no server.
    assert g["conn"] <= {"log"}, g["conn"]
    # A flight knows no request family: a waiter says how it is answered.
    assert not g["flight"] & {"compile", "cubin_req", "manage", "artifact", "reply",
                              "server"}, g["flight"]
    # The families stand on flight.c and conn.c, never on the server.
    for fam in ("compile", "cubin_req", "manage", "artifact", "reply"):
        assert "server" not in g[fam], (fam, g[fam])
    # The stages: compile.c hands on to cubin_req.c, never the reverse.
    assert "compile" in g["manage"] and "cubin_req" in g["compile"]
    assert "compile" not in g["cubin_req"], g["cubin_req"]
    # Nothing below the server calls it; main.c alone does.
    assert [a for a in g if "server" in g[a]] == ["main"]


def test_the_subsystem_table_names_every_file_of_daemon():
    """ARCHITECTURE.md's table of the daemon's subsystems names each
    source file of daemon/ (a header beside its .c goes without saying),
    and no file that is not there."""
    with open(os.path.join(ROOT, "ARCHITECTURE.md"), encoding="utf-8") as f:
        text = f.read()
    start = text.index("## The daemon's subsystems")
    table = text[start:text.index("\n## ", start + 1)]
    named = set(re.findall(r"`([a-z0-9_]+\.(?:c|h|cpp))`", table))
    files = set(os.listdir(os.path.join(ROOT, "daemon")))
    unnamed = {f for f in files - named if not (f.endswith(".h") and f[:-2] + ".c" in files)}
    assert not unnamed and named <= files, (sorted(unnamed), sorted(named - files))
