# SPDX-License-Identifier: Apache-2.0
"""The fuzz harnesses' seed corpora (tests/fuzz/corpus/), replayed through
the harnesses built with the normal compiler (build/fuzz/replay_*), as the
SQLite and ccache suites replay theirs on every run. `make fuzz` runs the
same harnesses under libFuzzer for longer."""
import os
import subprocess

from harness import BUILD, ROOT

CORPUS = os.path.join(ROOT, "tests", "fuzz", "corpus")


def replay(name):
    binary = os.path.join(BUILD, "fuzz", "replay_" + name)
    corpus = os.path.join(CORPUS, name)
    seeds = len(os.listdir(corpus))
    assert seeds >= 20, "corpus %s has only %d seeds" % (corpus, seeds)
    r = subprocess.run([binary, corpus], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, "replay_%s failed (%d):\n%s%s" % (name, r.returncode, r.stdout[-2000:],
                                                               r.stderr[-4000:])
    assert "replay: %d inputs, no failure" % seeds in r.stdout, r.stdout
    print("     %s: %d seeds replayed" % (name, seeds))


def test_fuzz_frame_corpus_replays():
    replay("frame")


def test_fuzz_request_corpus_replays():
    replay("request")


def test_fuzz_cubin_debug_corpus_replays():
    """Real cubins with their PTX and stamps, cut short and with header
    bytes changed: cubin_debug.c reads within bounds and its rewrites are
    exact both ways."""
    replay("cubin_debug")


def test_fuzz_flat_corpus_replays():
    """Components texts, real and broken: store_flat.c reads within the text, and
    what it parses writes out and parses again to the same fields."""
    replay("flat")
