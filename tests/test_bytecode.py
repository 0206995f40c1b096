# SPDX-License-Identifier: Apache-2.0
"""ptxcache.bytecode (the bytecode of Inductor's output code modules on
the daemon) and ptxcache.torch_key (PyTorch's installation hash on the
daemon), against the real daemon, through the stand-ins of PyTorch 2.11's
compile_tasks._reload_python_module, PyCodeCache.load_by_key_path and
codecache.torch_key (tests/jitstubs), installed by ptxcache.inductor's
import hook in fresh processes.
"""
import builtins
import json
import marshal
import os
import shutil
import subprocess
import sys
import tempfile

from harness import CLI, ROOT, Daemon

PKG = os.path.join(ROOT, "python")
STUBS = os.path.join(ROOT, "tests", "jitstubs")
if PKG not in sys.path:
    sys.path.insert(0, PKG)

from ptxcache import artifacts, bytecode  # noqa: E402

NOT_UNDER_SANITIZERS = "the Python package's own logic; the daemon's paths are test_artifact's"

# A generated module, Inductor-like: a call function, a nested function, a
# class, a docstring and an assert (both gone at -OO), a frozenset
# constant, and a function that raises (its traceback names the file).
SOURCE = '''
import math

ANSWER = "ANSWER_ONE"


def call(args):
    """The graph's docstring."""
    assert args is not None, "no args"

    def inner(x):
        return x * 2 + len(ANSWER)
    return [inner(a) for a in args if a in {1, 2, 3, 5, 8}] + [math.sqrt(16)]


class Runner:
    def run(self):
        return call([1, 2, 4, 5])


def boom():
    raise ValueError("boom")
''' + "".join("\ndef kernel_%d(x):\n    return x + %d\n" % (i, i) for i in range(200))

# The same with another answer: what a stale or foreign entry would run.
OTHER = SOURCE.replace("ANSWER_ONE", "ANSWER_TWO")

# A fresh process: builtins.compile counted for the module's path, the
# package's import hook, then PyTorch's loader (the stand-in's).
CHILD = r'''
import builtins, json, os, sys, traceback
path, want = sys.argv[1], sys.argv[2]
compiles = []
_real = builtins.compile
def counting(source, filename, mode, flags=0, dont_inherit=False, optimize=-1, **kw):
    if filename == path:
        compiles.append(filename)
    return _real(source, filename, mode, flags, dont_inherit, optimize, **kw)
builtins.compile = counting
import ptxcache.inductor
ptxcache.inductor.install_on_import()
import torch._inductor.codecache as cc
from ptxcache import bytecode
from ptxcache.artifacts import store
out = {"compiles": len(compiles)}
try:
    m = cc.PyCodeCache.load_by_key_path("c" + "k" * 8, path)
except Exception as e:
    out["error"] = "%s: %s" % (type(e).__name__, e)
else:
    try:
        m.boom()
    except ValueError:
        tb = traceback.extract_tb(sys.exc_info()[2])
    codes = [m.call.__code__] + [c for c in m.call.__code__.co_consts if hasattr(c, "co_filename")]
    out.update(answer=m.ANSWER, call=m.call([1, 2, 3, 4]), run=m.Runner().run(),
               doc=m.call.__doc__, file=m.__file__, name=m.__name__,
               in_sys_modules=sys.modules.get(m.__name__) is m,
               co_filenames=sorted({c.co_filename for c in codes}
                                   | {m.Runner.run.__code__.co_filename}),
               tb_file=tb[-1].filename, tb_line=tb[-1].line,
               kernels=sum(getattr(m, "kernel_%d" % i)(1) for i in range(200)))
    try:
        m.call(None)
    except Exception as e:      # AssertionError, or TypeError where asserts are gone (-O)
        out["assert"] = "%s: %s" % (type(e).__name__, e)
out.update(compiles=len(compiles), counts=bytecode.counts, layers=store().layers(),
           installed=bytecode.installed())
print(json.dumps(out))
'''


def clean_env(tmp, sock, **extra):
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("PTXCACHE_", "TRITON_", "TORCH", "PYTHON", "XDG_"))}
    env.update(PYTHONPATH=PKG + os.pathsep + STUBS, HOME=tmp, PYTHONDONTWRITEBYTECODE="1",
               PTXCACHE_BIN=CLI, PTXCACHE_AUTOSTART="0", PTXCACHE_SOCKET=sock)
    env.update(extra)
    return env


class Setup:
    def __init__(self, d):
        self.tmp = tempfile.mkdtemp(prefix="ptxcache-bc-")
        self.d = d
        self.child = os.path.join(self.tmp, "child.py")
        with open(self.child, "w") as f:
            f.write(CHILD)
        self.n = 0

    def module(self, source=SOURCE):
        """A new path (another process's cache directory) holding source."""
        self.n += 1
        p = os.path.join(self.tmp, "dir%d" % self.n, "cmodule.py")
        os.makedirs(os.path.dirname(p))
        with open(p, "w") as f:
            f.write(source)
        return p

    def run(self, path, flags=(), sock=None, **env):
        r = subprocess.run([sys.executable] + list(flags) + [self.child, path, ""],
                           env=clean_env(self.tmp, sock or self.d.socket, **env),
                           capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, (r.returncode, r.stdout, r.stderr)
        out = json.loads(r.stdout.strip().splitlines()[-1])
        out["stderr"] = r.stderr
        return out

    def close(self):
        shutil.rmtree(self.tmp, ignore_errors=True)


def same_module(a, b, path):
    """b is a's module, loaded from path."""
    for k in ("answer", "call", "run", "doc", "kernels", "assert", "tb_line"):
        assert a.get(k) == b.get(k), (k, a, b)
    assert b["file"] == path and b["co_filenames"] == [path] and b["tb_file"] == path, b
    assert b["in_sys_modules"] and b["name"] == "torch._inductor.runtime.compile_tasks.ckkkkkkkk", b


def entry(source, optimize=0, magic=None, ctx=None, payload=None):
    """(key, value) of the entry this interpreter makes for source (or with
    another magic number in its header, another context, or the code of
    another source, payload, behind its header)."""
    import hashlib
    data = source.encode()
    sha = hashlib.sha256(data).digest()
    ctx = ctx or bytecode.context(0, optimize)
    head = bytecode.header(ctx, data, sha)
    if magic is not None:
        head = head.replace(bytecode.FORMAT + bytecode.importlib.util.MAGIC_NUMBER,
                            bytecode.FORMAT + magic, 1)
    payload = marshal.dumps(builtins.compile(payload or source, "/elsewhere/cmodule.py", "exec", 0,
                                             True, optimize))
    return bytecode.key_for(ctx, sha), head + hashlib.sha256(payload).digest() + payload


def test_bytecode_second_process_loads_without_compiling():
    """A second process, at another path, gets the module from the daemon
    without compiling: the same results, __file__, sys.modules entry, and
    code and tracebacks that name its own path; off with
    PTXCACHE_BYTECODE=0."""
    with Daemon(workers=1) as d:
        s = Setup(d)
        try:
            first = s.run(s.module())
            assert "error" not in first, first
            assert first["compiles"] == 1 and first["installed"], first
            assert first["counts"] == {"loaded": 0, "compiled": 1, "rejected": 0, "stored": 1}, first
            assert first["answer"] == "ANSWER_ONE" and first["assert"] == "AssertionError: no args", first
            p2 = s.module()
            second = s.run(p2)
            assert second["compiles"] == 0, second
            assert second["counts"] == {"loaded": 1, "compiled": 0, "rejected": 0, "stored": 0}, \
                second
            same_module(first, second, p2)
            # Switched off: PyTorch's own compile, nothing asked.
            p3 = s.module()
            off = s.run(p3, PTXCACHE_BYTECODE="0")
            assert off["compiles"] == 1 and not off["installed"], off
            assert bytecode.NAMESPACE not in off["layers"], off
            same_module(first, off, p3)
        finally:
            s.close()


def test_bytecode_never_runs_stale_foreign_or_garbled_entries():
    """Entries that are not this interpreter's bytecode of this source are
    never run: the module is compiled from its source."""
    with Daemon(workers=1) as d:
        s = Setup(d)
        try:
            st = artifacts.ArtifactStore(d.socket)
            ref = s.run(s.module(), PTXCACHE_BYTECODE="0")
            assert ref["answer"] == "ANSWER_ONE", ref
            key, good = entry(SOURCE)
            _, stale = entry(OTHER)
            _, other_magic = entry(SOURCE, magic=b"\x00\x00\r\n", payload=OTHER)
            _, garbled = entry(SOURCE)
            assert garbled.count(b"ANSWER_ONE") == 1, "the constant appears once in the payload"
            garbled = garbled.replace(b"ANSWER_ONE", b"ANSWER_TWO")
            head_len = len(good) - 32 - len(marshal.dumps(builtins.compile(
                SOURCE, "/elsewhere/cmodule.py", "exec", 0, True)))
            not_code = (good[:head_len] + bytecode.hashlib.sha256(marshal.dumps(OTHER)).digest()
                        + marshal.dumps(OTHER))
            # Another interpreter's entry (another magic number) and those of
            # other optimize levels, each under the key it would use for
            # this source, holding code that answers otherwise: not this
            # interpreter's, which compiles.
            other_ctx = bytecode.context(0, 0).replace(
                "magic=" + bytecode.importlib.util.MAGIC_NUMBER.hex(), "magic=00000d0a")
            assert other_ctx != bytecode.context(0, 0)
            for k, v in (entry(SOURCE, ctx=other_ctx, payload=OTHER), entry(SOURCE, optimize=2),
                         entry(SOURCE, optimize=1)):
                assert st.put(bytecode.NAMESPACE, k, v), k
            r = s.run(s.module())
            assert r["counts"]["loaded"] == 0 and r["compiles"] == 1, r
            same_module(ref, r, r["file"])
            assert r["doc"] == "The graph's docstring." and r["assert"] == "AssertionError: no args", r
            # Entries under this interpreter's key that are not its
            # bytecode of this source: each rejected, then replaced.
            cases = {"stale (another source's)": stale,
                     "another magic number under this key": other_magic,
                     "garbled payload": garbled,
                     "truncated": good[:len(good) // 2],
                     "header only": good[:head_len],
                     "not a code object": not_code}
            for what, value in cases.items():
                assert st.put(bytecode.NAMESPACE, key, value), what
                r = s.run(s.module())
                assert r["counts"]["rejected"] == 1 and r["compiles"] == 1, (what, r)
                assert r["counts"]["loaded"] == 0, (what, r)
                same_module(ref, r, r["file"])
                # The compile replaced it with this interpreter's entry.
                assert st.get(bytecode.NAMESPACE, key) != value, what
            # At -OO the same source's key is the optimize=2 one: its entry
            # loads (docstring and assert gone, as at -OO's compile).
            oo = s.run(s.module(), flags=["-OO"])
            assert oo["counts"]["loaded"] == 1 and oo["compiles"] == 0, oo
            oo_ref = s.run(s.module(), flags=["-OO"], PTXCACHE_BYTECODE="0")
            same_module(oo_ref, oo, oo["file"])
            assert oo["doc"] is None and oo["assert"].startswith("TypeError"), oo
        finally:
            s.close()


def test_bytecode_bad_source_and_daemon_down():
    """A daemon that is down: the module compiles as before, one warning.
    Source that does not compile: PyTorch's RuntimeError, as without the
    package, and nothing stored."""
    with Daemon(workers=1) as d:
        s = Setup(d)
        try:
            ref = s.run(s.module(), PTXCACHE_BYTECODE="0")
            down = s.run(s.module(), sock=os.path.join(s.tmp, "nobody.sock"))
            assert down["compiles"] == 1 and down["counts"]["compiled"] == 1, down
            assert down["counts"]["loaded"] == 0 and down["counts"]["stored"] == 0, down
            same_module(ref, down, down["file"])
            assert len([x for x in down["stderr"].splitlines() if "ptxcache" in x]) == 1, down
            bad = SOURCE + "\ndef broken(:\n"
            p = s.module(bad)
            mine = s.run(p)
            theirs = s.run(p, PTXCACHE_BYTECODE="0")
            assert mine["error"].startswith("RuntimeError: Failed to import " + p), mine
            assert mine["error"] == theirs["error"], (mine, theirs)
            assert mine["counts"]["stored"] == 0 and mine["counts"]["compiled"] == 0, mine
        finally:
            s.close()


_INHERITS = '''
from __future__ import annotations
def go(compile):
    ns = {}
    exec(compile("def f(x: int): pass", "<t>", "exec"), ns)
    return ns["f"].__annotations__
'''


def test_bytecode_compile_is_the_builtin_for_other_callers():
    """The compile() given to compile_tasks is the builtin's for any other
    caller, down to the __future__ flags the caller's code passes on."""
    mine = bytecode._make_compile(test_bytecode_compile_is_the_builtin_for_other_callers.__code__)
    ns = {}
    exec(builtins.compile(_INHERITS, "<t>", "exec"), ns)
    assert ns["go"](mine) == ns["go"](builtins.compile) == {"x": "int"}, ns["go"](mine)
    assert mine("1 + 1", "<e>", "eval") == builtins.compile("1 + 1", "<e>", "eval")
    assert eval(mine("1 + 1", "<e>", "eval")) == 2


TKEY = r'''
import json, sys
import ptxcache.inductor
ptxcache.inductor.install_on_import()
import torch._inductor.codecache as cc
from ptxcache import torch_key
from ptxcache.artifacts import store
k1 = cc.torch_key()
k2 = cc.torch_key()
print(json.dumps({"key": k1.hex(), "same": k1 == k2, "counts": torch_key.counts,
                  "layers": store().layers(), "has_set": callable(getattr(cc.torch_key, "set", None))}))
'''


def test_torch_key_is_computed_once_per_installation():
    """codecache.torch_key() (Inductor's hash of PyTorch's files) comes
    from the daemon in a second process, is computed again once a file of
    PyTorch's changes, and is PyTorch's own with PTXCACHE_TORCH_KEY=0."""
    tmp = tempfile.mkdtemp(prefix="ptxcache-tk-")
    try:
        stubs = os.path.join(tmp, "stubs")
        shutil.copytree(STUBS, stubs, ignore=shutil.ignore_patterns("__pycache__"))
        marks = os.path.join(tmp, "marks")
        with open(os.path.join(tmp, "tkey.py"), "w") as f:
            f.write(TKEY)
        with Daemon(workers=1) as d:
            def run(**extra):
                env = clean_env(tmp, d.socket, PYTHONPATH=PKG + os.pathsep + stubs,
                                JITSTUB_MARKS=marks, **extra)
                r = subprocess.run([sys.executable, os.path.join(tmp, "tkey.py")], env=env,
                                   capture_output=True, text=True, timeout=120)
                assert r.returncode == 0, (r.stdout, r.stderr)
                out = json.loads(r.stdout.strip().splitlines()[-1])
                assert out["same"] and out["has_set"], out
                return out

            def computed():
                return len(os.listdir(marks)) if os.path.isdir(marks) else 0

            first = run()
            assert first["counts"] == {"stored": 0, "computed": 1} and computed() == 1, first
            second = run()
            assert second["key"] == first["key"], (first, second)
            assert second["counts"] == {"stored": 1, "computed": 0} and computed() == 1, second
            # A module of PyTorch's changes (in a subpackage): computed again.
            with open(os.path.join(stubs, "torch", "_inductor", "runtime", "__init__.py"), "a") as f:
                f.write("# another PyTorch\n")
            third = run()
            assert third["counts"] == {"stored": 0, "computed": 1} and computed() == 2, third
            assert third["key"] != first["key"], third
            # One of Inductor's extra files appears, in a directory that is
            # no package (pkgutil does not look there; torch_key reads it
            # by name): computed again.
            aoti = os.path.join(stubs, "torch", "_inductor", "codegen", "aoti_runtime")
            os.makedirs(aoti)
            with open(os.path.join(aoti, "interface.cpp"), "w") as f:
                f.write("// AOTInductor's interface\n")
            fourth = run()
            assert fourth["counts"]["computed"] == 1 and fourth["key"] != third["key"], fourth
            off = run(PTXCACHE_TORCH_KEY="0")
            assert off["key"] == fourth["key"] and computed() == 4, off
            assert "torch-key" not in off["layers"], off
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
