# SPDX-License-Identifier: Apache-2.0
"""One version everywhere: the Makefile's VERSION (which the daemon, the CLI,
the library's file name and ptxcache.pc take at build time) is the Python
package's __version__, pyproject.toml's (the wheel's), debian/changelog's
newest entry and the man pages', and what the built daemon and CLI say
(--version, and hello's version and server fields)."""
import os
import re
import subprocess
import sys

from harness import BUILD, CLI, DAEMON, ROOT, Daemon

sys.path.insert(0, os.path.join(ROOT, "python"))
import ptxcache  # noqa: E402
from ptxcache import client  # noqa: E402


def read(*parts):
    with open(os.path.join(ROOT, *parts), encoding="utf-8") as f:
        return f.read()


def makefile_version():
    m = re.search(r"^VERSION\s*:?=\s*(\S+)\s*$", read("Makefile"), re.M)
    assert m, "no VERSION in the Makefile"
    return m.group(1)


def test_version_is_the_same_in_every_place_it_is_written():
    v = makefile_version()
    found = {"python/ptxcache/__init__.py": ptxcache.__version__}
    m = re.search(r'^version\s*=\s*"([^"]+)"', read("pyproject.toml"), re.M)
    found["pyproject.toml"] = m and m.group(1)
    m = re.match(r"ptxcache \(([^)]+)\)", read("debian", "changelog"))
    found["debian/changelog"] = m and m.group(1).split("-")[0]
    for page in ("ptxcache.1", "ptxcached.8", "ptxcached.conf.5"):
        m = re.search(r'^\.TH .*"ptxcache ([^"]+)"', read("man", page), re.M)
        found["man/" + page] = m and m.group(1)
    assert all(x == v for x in found.values()), (v, found)
    # The library's file name comes from the same VERSION.
    assert os.path.exists(os.path.join(BUILD, "libptxcache.so." + v)), os.listdir(BUILD)


def test_version_is_what_the_built_programs_say():
    v = makefile_version()
    r = subprocess.run([CLI, "--version"], capture_output=True, text=True)
    assert r.stdout.strip() == "ptxcache " + v, r.stdout
    r = subprocess.run([DAEMON, "--version"], capture_output=True, text=True)
    assert r.stdout.startswith("ptxcached %s (" % v), r.stdout
    with Daemon(workers=1) as d:
        with client.Client(d.socket) as c:
            h = c.hello()
        assert h["version"] == v and h["server"] == "ptxcached " + v, h
        assert client.version_of(h) == v
        # A daemon from before the field: the server string says it.
        assert client.version_of({"server": "ptxcached 0.1.9"}) == "0.1.9"
