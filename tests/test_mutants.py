# SPDX-License-Identifier: Apache-2.0
"""The list of `make check-mutants` (tests/tools/mutants.py), checked where
the suite runs: each entry's pattern is one line of today's tree, and each
test it names exists. A fix that rewrites a line a mutant names would
otherwise be found only by check-mutants, at the end of CI."""
import ast
import glob
import os
import re
import sys

from harness import ROOT

sys.path.insert(0, os.path.join(ROOT, "tests", "tools"))
import mutants  # noqa: E402

# tests/run.py: left out of make check-asan.
NOT_UNDER_SANITIZERS = "the mutants' list checked against the sources: no C code runs"


def _python_tests():
    """{module: names of its top-level functions} for tests/test_*.py."""
    out = {}
    for path in glob.glob(os.path.join(ROOT, "tests", "test_*.py")):
        with open(path, encoding="utf-8") as f:
            body = ast.parse(f.read()).body
        out[os.path.basename(path)[:-3]] = {n.name for n in body if isinstance(n, ast.FunctionDef)}
    return out


def _unit_tests():
    names = set()
    for path in glob.glob(os.path.join(ROOT, "tests", "unit", "*.c")):
        with open(path, encoding="utf-8") as f:
            names.update(re.findall(r"^TEST\((\w+)\)", f.read(), re.M))
    return names


def test_every_mutant_names_one_line_of_the_tree_and_tests_that_exist():
    python, unit = _python_tests(), _unit_tests()
    wrong = []
    for m in mutants.MUTANTS:
        try:
            mutants.locate(ROOT, m)
        except ValueError as e:
            wrong.append("%s: %s" % (m.name, e))
        for t in m.tests:
            if t.startswith("unit:"):
                known = t[len("unit:"):] in unit
            else:
                module, _, name = t.partition(".")
                known = name in python.get(module, ())
            if not known:
                wrong.append("%s: no test %s" % (m.name, t))
    assert mutants.MUTANTS and not wrong, "\n".join(wrong)
