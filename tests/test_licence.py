# SPDX-License-Identifier: Apache-2.0
"""The project's licence: the Apache License 2.0 in LICENSE, an SPDX line
at the top of every source file the project wrote, and debian/copyright in
the machine-readable format saying so. Test data taken from elsewhere keeps
its own terms (debian/copyright, tests/corpus/README.md)."""
import os
import subprocess

from harness import ROOT, Skip

# tests/run.py: left out of make check-asan.
NOT_UNDER_SANITIZERS = "the tree's files read in Python: no C code runs"

TAG = "SPDX-License-Identifier: Apache-2.0"
SOURCE_EXT = (".c", ".h", ".cpp", ".py", ".sh", ".sql", ".map", ".in", ".socket",
              ".sysusers", ".conf", ".pth", ".postrm", ".1", ".5", ".8")
SOURCE_NAMES = ("Makefile", "debian/rules", ".ci/run")
DATA = ("tests/fuzz/corpus/", "tests/corpus/", "tests/inputs/")


def tracked():
    """The project's files: what git tracks, else (a copy that is no
    checkout: make deb's package tree, an unpacked sdist) the MANIFEST the
    copy carries. A package tree inside a checkout's build/ is in no git
    index: git answers, and lists nothing."""
    r = subprocess.run(["git", "-C", ROOT, "ls-files"], capture_output=True, text=True)
    if r.returncode == 0 and r.stdout.strip():
        return r.stdout.split()
    manifest = os.path.join(ROOT, "MANIFEST")
    if os.path.exists(manifest):
        with open(manifest, encoding="utf-8") as f:
            return [line.rstrip("\n") for line in f if line.strip()]
    raise Skip("neither a git checkout nor a copy with a MANIFEST: %s" % r.stderr.strip())


def test_licence_file_is_the_apache_license_2_0():
    text = open(os.path.join(ROOT, "LICENSE")).read()
    assert "Apache License" in text and "Version 2.0, January 2004" in text
    assert "END OF TERMS AND CONDITIONS" in text
    debian = "/usr/share/common-licenses/Apache-2.0"
    if os.path.exists(debian):
        assert text == open(debian).read(), "LICENSE differs from %s" % debian


def test_every_source_file_carries_the_spdx_line():
    missing = []
    n = 0
    for p in tracked():
        if p.startswith(DATA) or not (p.endswith(SOURCE_EXT) or p in SOURCE_NAMES):
            continue
        n += 1
        with open(os.path.join(ROOT, p), encoding="utf-8") as f:
            head = [f.readline() for _ in range(2)]
        if not any(TAG in line for line in head):
            missing.append(p)
    assert n > 100, n
    assert not missing, "no SPDX line in the first two lines of: %s" % ", ".join(missing)


def test_debian_copyright_is_machine_readable_and_apache():
    text = open(os.path.join(ROOT, "debian", "copyright")).read()
    paras = [p for p in text.split("\n\n") if p.strip()]
    assert paras[0].startswith("Format: https://www.debian.org/doc/packaging-manuals/"
                               "copyright-format/1.0/"), paras[0]
    files = {}
    licences = set()
    for p in paras[1:]:
        fields = dict(line.split(": ", 1) for line in p.splitlines()
                      if ": " in line and not line.startswith(" "))
        if "Files" in fields:
            files[fields["Files"]] = fields["License"]
        elif "License" in fields:
            licences.add(fields["License"])
    assert files.get("*") == "Apache-2.0", files
    # Every short name used has its text, and data from elsewhere is named.
    for lic in files.values():
        for name in lic.split(" and "):
            assert name in licences, (name, licences)
    assert "tests/corpus/*" in files, files
