# SPDX-License-Identifier: Apache-2.0
"""A JIT's own cache directory, kept file by file on the node's ptxcached
(and through its Redis tier, on every node): the files a JIT compiles into
its directory are published as they are completed, and a fresh process
finds the fleet's files in its directory before the JIT starts.

The directories (KINDS below; read in each tool's source, names checked
against the version named):

| kind | where | how the tool writes | what it keys on | served |
| --- | --- | --- | --- | --- |
| cupy | $CUPY_CACHE_DIR, else ~/.cupy/kernel_cache (cupy/cuda/compiler.py `get_cache_dir()`) | one file per kernel, `<md5>_2.cubin`, written to a `tempfile.NamedTemporaryFile(dir=cache_dir)` (`tmp*`) then `shutil.move` (a rename in the same directory) (`_compile_with_cache_cuda`); with CUPY_CACHE_SAVE_CUDA_SOURCE a `.cu` beside it written in place (left out) | the md5 of (arch, options, NVRTC version, NVRTC's preprocessed empty file, source); the file starts with the cubin's md5, checked when read | yes: files independent |
| deep_gemm | $DG_JIT_CACHE_DIR, else $HOME/.deep_gemm; kernels in `cache/` (csrc/jit/compiler.hpp `Compiler::Compiler`, `build`) | one directory per kernel, `cache/kernel.<name>.<hash>/` (kernel.cu, kernel.cubin, maybe .ptx/.sass), built in `tmp/<uuid>/`, fsync'd, then the whole directory renamed into `cache/` | the hash of (name, compiler signature NVCC/NVRTC x.y, flags with `--gpu-architecture=sm_XXa`, code) | yes: each kernel directory independent, materialized by a directory rename |
| numba-cuda | $NUMBA_CACHE_DIR/<dir>_<sha1>, else `__pycache__` beside the source (numba_cuda/numba/cuda/core/caching.py `_UserProvidedCacheLocator`, `_InTreeCacheLocator`) | per function an index `<f>-<line>.pyXY.nbi` (pickled {key: data file}, stamped with numba's version and the source file's mtime and size) rewritten by temp + `os.replace` (`IndexDataCacheFile._save_index`, `_open_for_write`), data `<f>-<line>.pyXY.<n>.nbc` numbered in order of compile | the index: (signature, codegen magic tuple (cc), bytecode hash) -> data file | no: the index is mutable and the numbered data files mean what one index says (another process's `.1.nbc` is another overload), and the source's mtime differs between nodes; kept whole per identity would serve one process's view over another's: left out |
| flashinfer | $FLASHINFER_WORKSPACE_BASE/.cache/flashinfer, else ~/.cache/flashinfer; `<archs>/cached_ops/<module>/` (flashinfer/jit/env.py `FLASHINFER_JIT_DIR`; flashinfer/jit/core.py `JitSpec.build`, `build_and_load`) | ninja (`run_ninja`) under a FileLock: objects and the `.so` written in place by nvcc and the linker, `build.ninja` by `write_if_different`, ninja's own `.ninja_log` / `.ninja_deps` appended | ninja's mtimes and logged command lines | no: files written in place (a crash leaves a partial one under its final name) and ninja's mutable logs decide what is rebuilt: left out |
| vllm | $VLLM_CACHE_ROOT, else $XDG_CACHE_HOME/vllm or ~/.cache/vllm (vllm/envs.py); `torch_compile_cache/<hash>/rank_i_j/` | Inductor's and Triton's artifacts (ptxcache.torch serves those through their own caches) and an index `vllm_compile_cache.py` rewritten as the process compiles | the hash of vLLM's config, the model and the code | no: a mutable index per directory; its contents are already on the daemon through ptxcache.torch: left out |

A directory a user declares (PTXCACHE_JIT_DIRS, below) is served like the
cupy kind: each file put in place by a rename, files independent.

How:
- Files are content-addressed: namespace ``jit-file``, key the SHA-256 of
  the bytes (one copy across jobs, models and directories; a value of
  256 KiB and more is a file on the daemon and may come as a descriptor).
  A file read back is checked against its key: a mismatch is a miss.
- What the fleet has for one (kind, identity) is a log of immutable
  segments, namespace ``jit-manifest``, key ``<kind>|<identity>|<n>``
  (n = 0, 1, ...), each JSON {relative path: [sha256, size, mode]}. A
  reader gets segments in order until one is missing. A publisher takes
  the daemon's lease on the first segment it does not find (get with
  lease; the daemon's fleet lease holds another node's get of it too),
  puts its entries there, and on finding the segment filled by another,
  moves to the next (bounded tries). Why a log, not one manifest that
  read-merge-put replaces: a node answers a key it holds from its own
  store and never asks Redis again, so a replaced manifest stays stale on
  every node that read it once; a new segment is a key no node holds yet.
  Two nodes that fill one segment at the same moment: Redis keeps one;
  the other's files are re-published by the next process that compiles
  them on a node that lacks them (a lost entry is wasted work, never a
  wrong file). A path's first entry in the log wins.
- Materialize (a background thread started when the import of the tool's
  module begins, which that import waits for once the module's own code
  has run, so the two overlap, bounded by PTXCACHE_JIT_WAIT_S, 30 s; a
  declared directory without a module, at enable(), which waits for it):
  the GPU's identity probed, the log read, the files missing from the
  directory fetched (batches of up to 256 files and 32 MiB, one request
  each, one after another), each written to `.ptxcache-*` in its own
  directory, its mode set, fsync'd where the tool syncs its own files
  (DeepGEMM, a declared directory; not CuPy, which neither syncs its files
  nor trusts them: a cubin whose md5 does not match is compiled again,
  so a file a power loss left empty costs one compile, as CuPy's own
  would, and never a wrong kernel), then hard-linked to its name (link()
  never replaces: a file already there stays, and a failure leaves no
  partial file; rename where the file system has no hard links, after a
  check) and the temporary name removed; a unit directory (deep_gemm) is built whole as
  `.ptxcache-*` and renamed into place when absent. Why at the import: a
  program that never imports the tool pays nothing for it (no probe, no
  fetch); waiting in the tool's import means the JIT's first lookup sees everything that
  arrived, so a fresh process on another node compiles nothing the fleet
  has. Where the wait times out, a file that arrives later is at worst a
  compile the JIT did for nothing (the tool's name is the hash of its key:
  the two files are equivalent, and neither write replaces the other
  half-way: both are renames or links of whole files).
- Publish: inotify (ctypes, Linux), IN_MOVED_TO in each watched directory,
  read in a daemon thread: a rename into the directory is the tool's sign
  that the file (or, renamed as one, the directory) is complete; a file
  written in place raises no IN_MOVED_TO and is never published, so a
  crash mid-write publishes nothing. New subdirectories are watched as they
  come (IN_CREATE) and scanned once watched, for files renamed into them
  before the watch existed; at start, for the kinds whose every final name
  is complete (cupy, deep_gemm: both only rename), the directory is
  scanned for files the manifest lacks (a process killed before it
  published, a cache that predates ptxcache) after the watch is in place.
  Temporary names (the tool's, ours), `*.nbi`, `*.lock`, ninja's logs are
  never published; a path renamed over once more with other bytes is a
  mutable file: never published. Files are put as they come; their entries
  go out as one segment per ~0.2 s of events and at exit (bounded): a
  process killed keeps what it published; a segment it had not put is
  re-published by the next process's start scan.
- Identity: never served across one. ``<tool dist>=<version>;<gpu>``: the
  tool's version from its installed metadata (importlib.metadata, the tool
  not imported), the GPU part from PTXCACHE_GPU_IDENTITY where set (for
  containers without a GPU and tests), else from the driver, by the thread
  that materializes (never on the program's own start): NVML in this
  process where CUDA_VISIBLE_DEVICES is unset (nvmlDeviceGetName,
  nvmlDeviceGetCudaComputeCapability, nvmlSystemGetCudaDriverVersion_v2:
  milliseconds, and no CUDA context), else, or where NVML fails, libcuda
  in a child process (sys.executable, bounded by 10 s: cuInit,
  cuDeviceGetName, cuDeviceGetAttribute 75/76, cuDriverGetVersion; cuInit
  in this process would leave CUDA unusable in its forked children); and
  the kernel module's version from /proc/driver/nvidia/version (/proc
  alone gives neither the compute capability nor the CUDA version). The
  answer is passed to child processes in PTXCACHE_GPU_IDENTITY_PROBED
  (with the CUDA_VISIBLE_DEVICES it was probed under). With neither GPU nor
  override, nothing is served (one log line).
- Declared directories: ``PTXCACHE_JIT_DIRS=NAME=PATH[:EXTRA][@MODULE],...``
  (NAME [a-z0-9_-]; PATH absolute, no ',' ':' '@'; EXTRA appended to the GPU
  identity, e.g. the tool's version; MODULE: the top-level module whose
  import waits for the directory, else enable() waits for it).
- Off: ``PTXCACHE_JIT_DIRS_OFF=1`` (or ``all``): none; ``=cupy,deep_gemm``:
  those. status() says what is served, under what identity, and why not.
- Bounds: a file of at most PTXCACHE_JIT_FILE_MAX bytes (64 MiB), 20000
  entries and 2048 segments per manifest, PTXCACHE_JIT_FETCH_MAX bytes
  written per process (4 GiB), 256 files and 32 MiB a request, 512 files a segment.
- Nothing here raises into the program or the JIT: the daemon down is a
  miss (artifacts.py warns once), a directory that is not writable is
  skipped with one log line (CuPy and DeepGEMM then fail their own writes
  as they would without ptxcache; numba disables its cache).
"""
from __future__ import annotations

import atexit
import ctypes
import errno
import fnmatch
import hashlib
import itertools
import json
import logging
import os
import re
import select
import struct
import sys
import threading
import time

TYPE_CHECKING = False
if TYPE_CHECKING:      # typing: 5 ms of an import; the names are annotations only
    from typing import Any

from .artifacts import ArtifactStore
from .hooks import wrapped_spec

__all__ = ["enable", "status", "wait", "KINDS", "NS_FILE", "NS_MANIFEST", "gpu_identity"]

log = logging.getLogger(__name__)

NS_FILE = "jit-file"
NS_MANIFEST = "jit-manifest"
ENV_DIRS = "PTXCACHE_JIT_DIRS"
ENV_OFF = "PTXCACHE_JIT_DIRS_OFF"
ENV_GPU = "PTXCACHE_GPU_IDENTITY"
ENV_PROBED = "PTXCACHE_GPU_IDENTITY_PROBED"
MAX_ENTRIES = 20000
MAX_SEGMENTS = 2048
SEGMENT_FILES = 512
BATCH_FILES, BATCH_BYTES = 256, 32 << 20
NEVER = ("*.nbi", "*.lock", ".ninja_log", ".ninja_deps", ".ptxcache-*", "*.tmp", "*.tmp.*")

# kind -> how the tool keeps its directory (see the table above).
KINDS: dict[str, dict[str, Any]] = {
    "cupy": {"env": "CUPY_CACHE_DIR", "default": "~/.cupy/kernel_cache", "sub": "",
             "dists": ("cupy-cuda13x", "cupy-cuda12x", "cupy-cuda11x", "cupy"),
             "module": "cupy", "units": False, "scan": True, "temp": ("tmp*", "*.cu"),
             "sync": False, "served": True},
    "deep_gemm": {"env": "DG_JIT_CACHE_DIR", "default": "~/.deep_gemm", "sub": "cache",
                  "dists": ("deep_gemm", "deep-gemm"), "module": "deep_gemm", "units": True,
                  "scan": True, "temp": (), "sync": True, "served": True},
    "numba-cuda": {"env": "NUMBA_CACHE_DIR", "module": "numba", "served": False,
                   "why": "a mutable index (.nbi) names numbered data files (.nbc) that mean "
                          "what that one index says, stamped with the source file's mtime"},
    "flashinfer": {"env": "FLASHINFER_WORKSPACE_BASE", "module": "flashinfer", "served": False,
                   "why": "ninja builds cached_ops in place (a crash leaves a partial file "
                          "under its name) and its mutable .ninja_log/.ninja_deps decide "
                          "what is rebuilt"},
    "vllm": {"env": "VLLM_CACHE_ROOT", "module": "vllm", "served": False,
             "why": "a mutable index (vllm_compile_cache.py) per directory; the Inductor and "
                    "Triton artifacts inside are served by ptxcache.torch"},
}

_PROBE = r"""
import ctypes, json, sys
try:
    l = ctypes.CDLL("libcuda.so.1")
except OSError as e:
    print(json.dumps({"error": "no libcuda.so.1: %s" % e})); sys.exit(0)
r = l.cuInit(0)
if r:
    print(json.dumps({"error": "cuInit: %d" % r})); sys.exit(0)
v, n = ctypes.c_int(), ctypes.c_int()
l.cuDriverGetVersion(ctypes.byref(v)); l.cuDeviceGetCount(ctypes.byref(n))
devs = set()
for i in range(n.value):
    d, ma, mi = ctypes.c_int(), ctypes.c_int(), ctypes.c_int()
    if l.cuDeviceGet(ctypes.byref(d), i):
        continue
    name = ctypes.create_string_buffer(256)
    l.cuDeviceGetName(name, 256, d)
    l.cuDeviceGetAttribute(ctypes.byref(ma), 75, d)
    l.cuDeviceGetAttribute(ctypes.byref(mi), 76, d)
    devs.add("%s/sm_%d%d" % (name.value.decode(errors="replace"), ma.value, mi.value))
print(json.dumps({"devices": sorted(devs), "cuda": v.value}))
"""


def _env_int(name: str, default: int) -> int:
    try:
        v = int(os.environ.get(name, ""))
        return v if v >= 0 else default
    except ValueError:
        return default


def gpu_identity() -> tuple[str | None, str]:
    """(the GPU part of an identity or None, where it came from)."""
    o = os.environ.get(ENV_GPU, "").strip()
    if o:
        return "gpu=" + o, ENV_GPU
    vis = os.environ.get("CUDA_VISIBLE_DEVICES", "")
    p = os.environ.get(ENV_PROBED, "")
    if p.startswith(vis + "|") and len(p) > len(vis) + 1:
        return p[len(vis) + 1:], "the parent's probe"
    ans = _nvml() if "CUDA_VISIBLE_DEVICES" not in os.environ else None
    how = "NVML"
    if ans is None:
        how = "the CUDA driver"
        import subprocess   # here: a thread's, off the tool's import
        try:
            r = subprocess.run([sys.executable, "-I", "-c", _PROBE], capture_output=True,
                               text=True, timeout=10)
            ans = json.loads(r.stdout.strip().splitlines()[-1])
        except (OSError, subprocess.SubprocessError, ValueError, IndexError) as e:
            return None, "the CUDA driver probe failed: %s" % e
    if ans.get("error") or not ans.get("devices"):
        return None, "no GPU: %s" % (ans.get("error") or "no device")
    nvrm = ""
    try:
        with open("/proc/driver/nvidia/version") as f:
            m = re.search(r"Kernel Module\s+(?:for \S+\s+)?([0-9.]+)", f.read())
            nvrm = m.group(1) if m else ""
    except OSError:
        pass
    ident = "gpu=%s;cuda=%d;nvrm=%s" % (",".join(ans["devices"]), ans["cuda"], nvrm)
    os.environ[ENV_PROBED] = vis + "|" + ident
    return ident, how


def _nvml() -> dict[str, Any] | None:
    """What _PROBE answers, from NVML in this process: every GPU's name and
    compute capability, and the CUDA version the driver supports. NVML
    makes no CUDA context (a fork after it is safe) and takes milliseconds
    where cuInit in a child process took 0.3 s of a warm CuPy process's
    1.5 s. Used only where CUDA_VISIBLE_DEVICES is unset (NVML lists every
    GPU, CUDA the visible ones); None where NVML is missing or fails: the
    probe answers then."""
    try:
        nv = ctypes.CDLL("libnvidia-ml.so.1")
    except OSError:
        return None
    if nv.nvmlInit_v2() != 0:
        return None
    try:
        n, v = ctypes.c_uint(), ctypes.c_int()
        if nv.nvmlDeviceGetCount_v2(ctypes.byref(n)) or \
                nv.nvmlSystemGetCudaDriverVersion_v2(ctypes.byref(v)):
            return None
        devs = set()
        for i in range(n.value):
            h, ma, mi = ctypes.c_void_p(), ctypes.c_int(), ctypes.c_int()
            name = ctypes.create_string_buffer(256)
            if (nv.nvmlDeviceGetHandleByIndex_v2(i, ctypes.byref(h))
                    or nv.nvmlDeviceGetName(h, name, 256)
                    or nv.nvmlDeviceGetCudaComputeCapability(h, ctypes.byref(ma), ctypes.byref(mi))):
                return None
            devs.add("%s/sm_%d%d" % (name.value.decode(errors="replace"), ma.value, mi.value))
        return {"devices": sorted(devs), "cuda": v.value} if devs else None
    except (AttributeError, OSError):
        return None
    finally:
        nv.nvmlShutdown()


def _tool_version(dists: tuple[str, ...]) -> str | None:
    """"<dist>=<version>" of the first of dists installed on sys.path, as
    importlib.metadata.version() finds it: the `<name>-<version>.dist-info`
    directory's METADATA read directly (importlib.metadata's import and
    search are 20 to 30 ms), else importlib.metadata itself (egg-info, a
    zip)."""
    want = {re.sub(r"[-_.]+", "_", d).lower(): d for d in dists}
    for base in sys.path:
        try:
            names = os.listdir(base or ".")
        except OSError:
            continue
        for name in names:
            if not name.endswith(".dist-info"):
                continue
            d = want.get(re.sub(r"[-_.]+", "_", name[:-10].rsplit("-", 1)[0]).lower())
            if d is None:
                continue
            try:
                with open(os.path.join(base, name, "METADATA"), encoding="utf-8") as f:
                    for line in f:
                        if not line.strip():
                            break
                        if line.startswith("Version:"):
                            return "%s=%s" % (d, line[8:].strip())
            except OSError:
                pass
    import importlib.metadata
    for d in dists:
        try:
            return "%s=%s" % (d, importlib.metadata.version(d))
        except importlib.metadata.PackageNotFoundError:
            continue
        except Exception:   # a broken install's metadata
            continue
    return None


class _Dir:
    """One served directory: its manifest, materialization and watch."""

    def __init__(self, name: str, root: str, identity: str, units: bool, scan: bool,
                 temp: tuple[str, ...], module: str | None) -> None:
        self.name, self.root, self.identity = name, root, identity
        self.units, self.scan, self.module = units, scan, module
        self.skip = tuple(temp) + NEVER
        self.known: dict[str, list] = {}     # the fleet's manifest as read/written
        self.next_seg = 0
        self.ours: set[str] = set()          # paths this process wrote (not to publish)
        self.mutable: set[str] = set()
        self.pending: dict[str, list] = {}   # published files whose entries are not out yet
        self.lock = threading.Lock()
        self.ready = threading.Event()
        self.counts = {"materialized": 0, "present": 0, "published": 0, "segments_read": 0,
                       "segments_written": 0, "refused": 0, "fetch_misses": 0, "fetches": 0}
        # Where a process's fill went, in ms (status()): the identity
        # found, the log read, the files fetched and written, and how long
        # the tool's import was held after its own code had run.
        self.ms = {"identity": 0.0, "log": 0.0, "fetch": 0.0, "write": 0.0, "held": 0.0}
        self.why = ""
        self.dists: tuple[str, ...] = ()     # a tool's distributions; () declared
        self.sync = True                      # files fsync'd before their link (KINDS)

    # ---- the manifest log ----------------------------------------------------

    def _seg_key(self, n: int) -> str:
        return "%s|%s|%d" % (self.name, self.identity, n)

    def _take(self, value: bytes) -> None:
        try:
            seg = json.loads(value)
        except ValueError:
            return
        if not isinstance(seg, dict):
            return
        for path, e in seg.items():
            if len(self.known) >= MAX_ENTRIES:
                return
            if (isinstance(path, str) and _safe_rel(path) and isinstance(e, list) and len(e) == 3
                    and isinstance(e[0], str) and len(e[0]) == 64 and isinstance(e[1], int)
                    and e[1] >= 0 and isinstance(e[2], int)):
                self.known.setdefault(path, e)

    def read_log(self, st: ArtifactStore) -> None:
        while self.next_seg < MAX_SEGMENTS:
            keys = [self._seg_key(n) for n in range(self.next_seg,
                                                     min(self.next_seg + 16, MAX_SEGMENTS))]
            got = st.get_many(NS_MANIFEST, keys)
            for k in keys:
                if k not in got:
                    return
                self._take(got[k])
                self.next_seg += 1
                self.counts["segments_read"] += 1

    def write_segment(self, st: ArtifactStore) -> None:
        with self.lock:
            entries, self.pending = self.pending, {}
        for _try in range(64):
            entries = {p: e for p, e in entries.items() if p not in self.known}
            if not entries or self.next_seg >= MAX_SEGMENTS or len(self.known) >= MAX_ENTRIES:
                return
            k = self._seg_key(self.next_seg)
            v = st.get(NS_MANIFEST, k, lease=True)
            if v is not None:
                self._take(v)
                self.next_seg += 1
                continue
            if not st.holds(NS_MANIFEST, k):
                continue        # another producer's, not put: ask again
            body = json.dumps(entries, sort_keys=True, separators=(",", ":")).encode()
            if not st.put(NS_MANIFEST, k, body):
                return
            self._take(body)
            self.next_seg += 1
            self.counts["segments_written"] += 1
            return

    # ---- materialize ---------------------------------------------------------

    def materialize(self, st: ArtifactStore, budget: list[int]) -> None:
        t0 = time.monotonic()
        self.read_log(st)
        self.ms["log"] += (time.monotonic() - t0) * 1000
        groups: dict[str, list[str]] = {}
        for path in self.known:
            unit = path.split("/", 1)[0] if self.units else path
            if self.units and "/" not in path:
                continue
            groups.setdefault(unit, []).append(path)
        try:    # one call for the directory's names, not one per unit
            there: set[str] | None = set(os.listdir(self.root))
        except OSError:
            there = None
        todo = []
        for unit, paths in sorted(groups.items()):
            if (unit in there if there is not None and "/" not in unit
                    else os.path.lexists(os.path.join(self.root, unit))):
                self.counts["present"] += 1
                continue
            size = sum(self.known[p][1] for p in paths)
            with self.lock:
                if budget[0] < size:
                    continue
                budget[0] -= size
            todo.append((unit, paths))
        # Units in batches of at most BATCH_FILES files and BATCH_BYTES,
        # one request each (63 small cubins are one request, not 63), one
        # after another on this thread: the daemon answers a batch's keys
        # at once (from Redis too), and threads here would only contend
        # for the interpreter's lock and the directory's (1,000 files of
        # 30 KB: 0.55 s on one thread, 0.87 s on four, on 2 cores).
        batch: list[tuple[str, list[str]]] = []
        files = size = 0
        for unit, paths in todo:
            n, b = len(paths), sum(self.known[p][1] for p in paths)
            if batch and (files + n > BATCH_FILES or size + b > BATCH_BYTES):
                self._fetch(st, batch)
                batch, files, size = [], 0, 0
            batch.append((unit, paths))
            files, size = files + n, size + b
        if batch:
            self._fetch(st, batch)

    def _fetch(self, st: ArtifactStore, units: list[tuple[str, list[str]]]) -> None:
        self.counts["fetches"] += 1
        t0 = time.monotonic()
        try:
            got = st.get_many(NS_FILE, sorted({self.known[p][0] for _u, ps in units for p in ps}))
        except Exception as e:      # never into the program
            log.debug("ptxcache: jit dir %s: %s", self.name, e)
            return
        t1 = time.monotonic()
        for unit, paths in units:
            self._one_unit(unit, paths, got)
        self.ms["fetch"] += (t1 - t0) * 1000
        self.ms["write"] += (time.monotonic() - t1) * 1000

    def _one_unit(self, unit: str, paths: list[str], got: dict[str, bytes]) -> None:
        try:
            shas = sorted({self.known[p][0] for p in paths})
            data = {}
            for s in shas:
                v = got.get(s)
                if v is None or hashlib.sha256(v).hexdigest() != s:
                    self.counts["fetch_misses"] += 1
                    return      # a miss, or bytes that are not their key: the JIT compiles
                data[s] = v
            if self.units:
                self._write_unit(unit, {p: data[self.known[p][0]] for p in paths})
            else:
                p = paths[0]
                if _write_new(os.path.join(self.root, p), data[self.known[p][0]],
                              self.known[p][2], self.sync):
                    self.ours.add(p)
                    self.counts["materialized"] += 1
        except Exception as e:      # never into the program
            log.debug("ptxcache: jit dir %s: %s: %s", self.name, unit, e)

    def _write_unit(self, unit: str, files: dict[str, bytes]) -> None:
        final = os.path.join(self.root, unit)
        tmp = _tmp_name(self.root)
        os.mkdir(tmp, 0o755)
        try:
            for p, v in files.items():
                rel = p.split("/", 1)[1]
                dst = os.path.join(tmp, rel)
                os.makedirs(os.path.dirname(dst), exist_ok=True)
                _write_fd(dst, v, self.known[p][2], self.sync)
            _fsync_dir(tmp)
            if os.path.lexists(final):
                return
            self.ours.add(unit)
            os.rename(tmp, final)   # a directory renamed whole: the tool's own way
            _fsync_dir(self.root)
            self.counts["materialized"] += 1
            tmp = ""
        finally:
            if tmp:
                _rmtree(tmp)

    # ---- publish -------------------------------------------------------------

    def skipped(self, rel: str) -> bool:
        return any(fnmatch.fnmatch(part, pat) for part in rel.split("/") for pat in self.skip)

    def publish_file(self, st: ArtifactStore, rel: str, max_file: int) -> None:
        """rel is complete (renamed into place): its bytes to the daemon."""
        if self.skipped(rel) or rel in self.mutable:
            return
        path = os.path.join(self.root, rel)
        try:
            with open(path, "rb", opener=lambda p, f: os.open(p, f | os.O_NOFOLLOW)) as f:
                s = os.fstat(f.fileno())
                if not _is_reg(s.st_mode) or s.st_size > max_file:
                    self.counts["refused"] += 1
                    return
                v = f.read(max_file + 1)
        except OSError:
            return
        if len(v) != s.st_size:
            return
        sha = hashlib.sha256(v).hexdigest()
        with self.lock:
            old = self.known.get(rel) or self.pending.get(rel)
        if old is not None:
            if old[0] != sha:
                self.mutable.add(rel)   # replaced by other bytes: an index, not a result
            return
        if rel in self.ours:
            return
        if not st.put(NS_FILE, sha, v):
            return
        with self.lock:
            self.pending[rel] = [sha, len(v), s.st_mode & 0o777]
            self.counts["published"] += 1

    def publish_tree(self, st: ArtifactStore, rel: str, max_file: int) -> None:
        """Every file under the directory rel (complete: it was renamed
        into place, or the kind writes only by rename)."""
        base = os.path.join(self.root, rel) if rel else self.root
        n = 0
        for dp, dns, fns in os.walk(base):
            dns[:] = [d for d in dns if not any(fnmatch.fnmatch(d, p) for p in self.skip)]
            for fn in fns:
                n += 1
                if n > MAX_ENTRIES:
                    return
                r = os.path.relpath(os.path.join(dp, fn), self.root)
                if (self.units and "/" not in r) or r in self.ours or r in self.known:
                    continue    # what the manifest has is not read and hashed again
                self.publish_file(st, r, max_file)


def _safe_rel(p: str) -> bool:
    parts = p.split("/")
    return (0 < len(p) < 4096 and not p.startswith("/") and "\0" not in p
            and all(x not in ("", ".", "..") for x in parts))


def _is_reg(mode: int) -> bool:
    import stat
    return stat.S_ISREG(mode)


def _write_fd(path: str, data: bytes, mode: int, sync: bool = True) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        os.fchmod(fd, mode & 0o777 or 0o644)
        if sync:
            os.fsync(fd)
    finally:
        os.close(fd)


_RUN = os.urandom(6).hex()
_seq = itertools.count()


def _tmp_name(d: str) -> str:
    """A temporary name of ours (NEVER publishes it) in d, unique to this
    process and call."""
    return os.path.join(d, ".ptxcache-%d-%s-%d" % (os.getpid(), _RUN, next(_seq)))


def _write_new(final: str, data: bytes, mode: int, sync: bool = True) -> bool:
    """final created whole with data, never replacing a file there."""
    d = os.path.dirname(final)
    tmp = _tmp_name(d)
    try:
        _write_fd(tmp, data, mode, sync)
    except FileNotFoundError:       # its directory first (a flat one exists: no call)
        os.makedirs(d, exist_ok=True)
        _write_fd(tmp, data, mode, sync)
    try:
        try:
            os.link(tmp, final)
        except FileExistsError:
            return False
        except OSError as e:
            if e.errno not in (errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EXDEV,
                               errno.EMLINK):
                raise
            if os.path.lexists(final):
                return False
            os.rename(tmp, final)
            tmp = ""
        return True
    finally:
        if tmp:
            os.unlink(tmp)


def _fsync_dir(path: str) -> None:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _rmtree(path: str) -> None:
    import shutil
    shutil.rmtree(path, ignore_errors=True)


# ---- inotify ---------------------------------------------------------------

IN_MOVED_TO, IN_CREATE, IN_Q_OVERFLOW, IN_IGNORED = 0x80, 0x100, 0x4000, 0x8000
IN_ONLYDIR, IN_ISDIR, IN_NONBLOCK, IN_CLOEXEC = 0x01000000, 0x40000000, 0o4000, 0o2000000
_EVENT = struct.Struct("iIII")
MAX_WATCHES = 4096


class _Watcher:
    """IN_MOVED_TO in every served directory (and its subdirectories, but
    under unit directories), read in one daemon thread; published files'
    entries go out as a segment about every 0.2 s."""

    def __init__(self, st: ArtifactStore, max_file: int) -> None:
        self.st, self.max_file = st, max_file
        self.libc = ctypes.CDLL(None, use_errno=True)
        self.fd = self.libc.inotify_init1(IN_NONBLOCK | IN_CLOEXEC)
        if self.fd < 0:
            raise OSError(ctypes.get_errno(), "inotify_init1")
        self.wds: dict[int, tuple[_Dir, str]] = {}
        self.stop = threading.Event()
        self.dirty: set[_Dir] = set()
        # Wakes the thread's select(): entries to send (poke()), or the exit.
        self.wake_r, self.wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        self.thread: threading.Thread | None = None
        self.lock = threading.Lock()

    def add(self, d: _Dir, rel: str) -> bool:
        if len(self.wds) >= MAX_WATCHES:
            return False
        path = os.path.join(d.root, rel) if rel else d.root
        wd = self.libc.inotify_add_watch(self.fd, os.fsencode(path),
                                         IN_MOVED_TO | IN_CREATE | IN_ONLYDIR)
        if wd < 0:
            return False
        self.wds[wd] = (d, rel)
        return True

    def add_tree(self, d: _Dir, rel: str) -> None:
        """Watch rel and its subdirectories (not under unit directories)."""
        if not self.add(d, rel) or d.units:
            return
        base = os.path.join(d.root, rel) if rel else d.root
        try:
            subs = [e.name for e in os.scandir(base) if e.is_dir(follow_symlinks=False)]
        except OSError:
            return
        for s in subs:
            r = os.path.join(rel, s) if rel else s
            if not d.skipped(r):
                self.add_tree(d, r)

    def start(self) -> None:
        with self.lock:
            if self.thread is None:
                self.thread = threading.Thread(target=self._run, name="ptxcache-jitdirs",
                                               daemon=True)
                self.thread.start()

    def poke(self) -> None:
        try:
            os.write(self.wake_w, b"x")
        except OSError:
            pass        # full: the thread is awake already

    def _run(self) -> None:
        last = time.monotonic()
        while not self.stop.is_set():
            # Asleep until an event, a poke or the exit; while entries wait,
            # until their segment is due.
            due = max(0.0, last + 0.2 - time.monotonic()) if self.dirty else None
            try:
                r, _, _ = select.select([self.fd, self.wake_r], [], [], due)
                if self.wake_r in r:
                    os.read(self.wake_r, 4096)
                if self.fd in r:
                    self._read()
            except Exception as e:
                log.debug("ptxcache: jit dirs watch: %s", e)
            if self.dirty and time.monotonic() - last >= 0.2:
                self.flush()
                last = time.monotonic()
        self._drain()

    def _drain(self) -> None:
        try:
            self._read()
        except Exception:
            pass
        self.flush()

    def _read(self) -> None:
        while True:
            try:
                buf = os.read(self.fd, 65536)
            except BlockingIOError:
                return
            off = 0
            while off + _EVENT.size <= len(buf):
                wd, mask, _cookie, n = _EVENT.unpack_from(buf, off)
                name = buf[off + _EVENT.size:off + _EVENT.size + n].split(b"\0", 1)[0]
                off += _EVENT.size + n
                self._event(wd, mask, os.fsdecode(name))

    def _event(self, wd: int, mask: int, name: str) -> None:
        if mask & IN_Q_OVERFLOW:
            for d in {d for d, _ in self.wds.values()}:
                if d.scan:      # events were lost: what is there, again
                    d.publish_tree(self.st, "", self.max_file)
                    self.dirty.add(d)
            return
        if mask & IN_IGNORED:
            self.wds.pop(wd, None)
            return
        if wd not in self.wds or not name:
            return
        d, rel = self.wds[wd]
        r = os.path.join(rel, name) if rel else name
        if d.skipped(r):
            return
        if mask & IN_ISDIR:
            if d.units:
                if not rel and mask & IN_MOVED_TO and r not in d.ours:
                    d.publish_tree(self.st, r, self.max_file)
                    self.dirty.add(d)
                return
            # A new subdirectory: watched, then what reached it before.
            self.add_tree(d, r)
            d.publish_tree(self.st, r, self.max_file)
            self.dirty.add(d)
        elif mask & IN_MOVED_TO and not d.units:
            d.publish_file(self.st, r, self.max_file)
            self.dirty.add(d)

    def flush(self) -> None:
        dirty, self.dirty = self.dirty, set()
        for d in dirty:
            while d.pending:
                with d.lock:
                    if len(d.pending) > SEGMENT_FILES:
                        keys = sorted(d.pending)[SEGMENT_FILES:]
                        rest = {k: d.pending.pop(k) for k in keys}
                    else:
                        rest = {}
                d.write_segment(self.st)
                with d.lock:
                    d.pending.update(rest)
                if not rest:
                    break

    def close(self, timeout: float) -> None:
        self.stop.set()
        self.poke()
        if self.thread is not None:
            self.thread.join(timeout)


# ---- the import hook -------------------------------------------------------

class _Gate:
    """Starts filling a served tool's directory when the import of its
    top-level module begins, and holds that import, once the module's code
    has run, until the directory is materialized (or the deadline passes):
    the tool's import and the fetch overlap, and no kernel of the tool's is
    looked up before its files are in place (none is during its import).
    The wait runs in the module's exec_module, not in find_spec: the import
    system holds its global lock around find_spec, and the filling thread
    imports too. A tool that is a namespace package (no exec_module) is
    not held."""

    def __init__(self) -> None:
        self.waits: dict[str, list[_Dir]] = {}
        self.deadline = 30.0
        self.start: Any = None      # enable()'s start_fill(dirs)
        self.started: set[str] = set()

    def _wait(self, name: str) -> None:
        t0 = time.monotonic()
        end = t0 + self.deadline
        for d in self.waits.pop(name, []):
            ok = d.ready.wait(max(0.0, end - time.monotonic()))
            d.ms["held"] = (time.monotonic() - t0) * 1000
            if not ok:
                log.info("ptxcache: %s imported before its JIT directory %s was filled "
                         "(%.0f s)", name, d.root, self.deadline)
                break

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> Any:
        if name not in self.waits:
            return None
        if name not in self.started:
            self.started.add(name)
            self.start(self.waits[name])
        return wrapped_spec(self, name, path, target, after=lambda _module: self._wait(name))


# ---- enable / status --------------------------------------------------------

_state: dict[str, Any] = {}
_lock = threading.Lock()


def _off() -> set[str] | bool:
    v = os.environ.get(ENV_OFF, "").strip()
    if not v or v == "0":
        return set()
    if v in ("1", "all", "yes", "true"):
        return True
    return {x.strip() for x in v.split(",") if x.strip()}


def _declared(spec: str) -> tuple[list[tuple[str, str, str, str | None]], list[str]]:
    """PTXCACHE_JIT_DIRS -> ([(name, path, extra, module)], [errors])."""
    out, bad = [], []
    for item in (x.strip() for x in spec.split(",")):
        if not item:
            continue
        m = re.fullmatch(r"([a-z0-9_-]{1,32})=(/[^:@]*)(?::([^@]*))?(?:@([A-Za-z_][A-Za-z0-9_]*))?",
                         item)
        if not m:
            bad.append(item)
            continue
        out.append((m.group(1), os.path.normpath(m.group(2)), m.group(3) or "", m.group(4)))
    return out, bad


def _writable(root: str) -> str | None:
    """None if root is (now) a directory this process may write, else why."""
    try:
        os.makedirs(root, exist_ok=True)
    except OSError as e:
        return "cannot create it: %s" % e.strerror
    if not os.access(root, os.W_OK | os.X_OK):
        return "not writable"
    return None


def enable() -> dict[str, Any]:
    """Serve every known and declared directory that has an identity;
    returns status(). Safe to call more than once (the first wins)."""
    with _lock:
        if _state.get("enabled"):
            return status()
        t0 = time.monotonic()
        try:
            _enable()
        except Exception as e:      # never into the program
            log.warning("ptxcache: JIT directories not served: %s", e)
            _state.update(enabled=True, error=str(e))
        _state["enable_ms"] = round((time.monotonic() - t0) * 1000, 1)
    return status()


# Where a plan's identity takes the tool's version and the GPU's part, once
# the thread that fills it knows them.
TOOL, GPU = "{tool}", "{gpu}"


def _enable() -> None:
    off = _off()
    rows: dict[str, dict[str, Any]] = {}
    _state.update(enabled=True, rows=rows, dirs=[])
    if off is True:
        _state["off"] = "%s=%s" % (ENV_OFF, os.environ.get(ENV_OFF))
        return
    # (name, root, identity template, units, scan, temp, module, dists):
    # whether the tool is installed, its version, the GPU's part and whether
    # the directory can be written are found by the thread that fills it.
    plans: list[tuple[str, str, str, bool, bool, tuple, str | None, tuple]] = []
    for name, k in KINDS.items():
        row = rows[name] = {"served": False, "module": k.get("module")}
        if name in off:
            row["why"] = "off (%s)" % ENV_OFF
            continue
        if not k["served"]:
            row["why"] = "left out: " + k["why"]
            continue
        base = os.environ.get(k["env"]) or os.path.expanduser(k["default"])
        root = os.path.join(base, k["sub"]) if k["sub"] else base
        row["path"] = root
        plans.append((name, root, TOOL + ";" + GPU, k["units"], k["scan"], k["temp"], k["module"],
                      k["dists"]))
    decl, bad = _declared(os.environ.get(ENV_DIRS, ""))
    for item in bad:
        log.warning("ptxcache: %s: '%s' is not NAME=/PATH[:EXTRA][@MODULE]", ENV_DIRS, item)
    for name, path, extra, module in decl:
        row = rows[name] = {"served": False, "module": module, "path": path, "declared": True}
        if name in off:
            row["why"] = "off (%s)" % ENV_OFF
            continue
        plans.append((name, path, GPU + ";declared=" + extra, False, False, (), module, ()))
    if not plans:
        return
    dirs: list[_Dir] = []
    for name, root, ident, units, scan, temp, module, dists in plans:
        d = _Dir(name, root, ident, units, scan, temp, module)
        d.dists = dists
        d.sync = KINDS.get(name, {}).get("sync", True) if dists else True
        rows[name].update(served=True, path=root, identity="found when %s is imported"
                          % module if module else "being found")
        dirs.append(d)
    st = ArtifactStore(wait_ms=_env_int("PTXCACHE_JIT_LEASE_WAIT_MS", 5000))
    max_file = _env_int("PTXCACHE_JIT_FILE_MAX", 64 << 20)
    budget = [_env_int("PTXCACHE_JIT_FETCH_MAX", 4 << 30)]
    gate = _Gate()
    gate.deadline = float(_env_int("PTXCACHE_JIT_WAIT_S", 30))
    for d in dirs:
        if d.module:
            gate.waits.setdefault(d.module, []).append(d)
    if gate.waits:
        sys.meta_path.insert(0, gate)
    watcher = None
    if sys.platform.startswith("linux"):
        try:
            watcher = _Watcher(st, max_file)
        except Exception as e:
            log.info("ptxcache: JIT directories not published (no inotify: %s)", e)
    _state.update(dirs=dirs, store=st, watcher=watcher, gate=gate)

    def fill(batch: list[_Dir]) -> None:
        # The GPU's part of the identity here, off the program's start: the
        # driver's probe is a process of its own (gpu_identity()).
        t0 = time.monotonic()
        with _lock:
            if "gpu" not in _state:
                _state["gpu"] = gpu_identity()
        g, src = _state["gpu"]
        ok = []
        for d in batch:
            tool = _tool_version(d.dists) if d.dists else ""
            d.ms["identity"] = (time.monotonic() - t0) * 1000
            why = ("not installed (no metadata for %s)" % " or ".join(d.dists) if tool is None
                   else "no identity: %s, and %s is not set" % (src, ENV_GPU) if g is None
                   else _writable(d.root))
            if why:
                rows[d.name].pop("identity", None)
                rows[d.name].update(served=False, why=why if tool is None or g is None
                                    else "%s: %s" % (d.root, why))
                if tool is not None and g is not None:
                    log.info("ptxcache: JIT directory %s (%s) not served: %s", d.name, d.root, why)
                d.ready.set()
                continue
            d.identity = d.identity.replace(TOOL, tool or "", 1).replace(GPU, g, 1)
            rows[d.name]["identity"] = d.identity
            ok.append(d)
        if g is None and not _state.get("gpu_logged"):
            _state["gpu_logged"] = True
            log.info("ptxcache: no JIT directory served: %s, and %s is not set", src, ENV_GPU)
        for d in ok:
            try:
                d.materialize(st, budget)
            except Exception as e:
                log.debug("ptxcache: jit dir %s: %s", d.name, e)
            finally:
                d.ready.set()
            if watcher is not None:
                try:
                    watcher.add_tree(d, "")
                    if d.scan:  # what reached it before the watch, unpublished
                        d.publish_tree(st, "", max_file)
                        watcher.dirty.add(d)
                        watcher.poke()
                except Exception as e:
                    log.debug("ptxcache: jit dir %s watch: %s", d.name, e)
        if watcher is not None:
            watcher.start()

    def start_fill(batch: list[_Dir]) -> None:
        t = threading.Thread(target=fill, args=(batch,), name="ptxcache-jitdirs-fill", daemon=True)
        t.start()
        _state["fillers"].append(t)

    # A tool's directory is filled once its module's import begins (the
    # gate), so a program that never imports it pays nothing for it; a
    # declared directory without a module, now, and enable() waits for it.
    _state["fillers"] = []
    gate.start = start_fill
    atexit.register(_at_exit)
    now = [d for d in dirs if d.module is None]
    if now:
        start_fill(now)
        end = time.monotonic() + gate.deadline
        for d in now:
            d.ready.wait(max(0.0, end - time.monotonic()))


def wait(timeout: float = 30.0) -> bool:
    """Wait until every served directory is materialized (a tool's, once
    its module's import began); True if so."""
    end = time.monotonic() + timeout
    for d in _state.get("dirs", []):
        if not d.ready.wait(max(0.0, end - time.monotonic())):
            return False
    return True


def _at_exit() -> None:
    for t in _state.get("fillers", []):
        t.join(2.0)
    w = _state.get("watcher")
    if w is not None:
        w.close(_env_int("PTXCACHE_JIT_EXIT_S", 5))


def status() -> dict[str, Any]:
    """{enabled, off?, dirs: {name: {served, path, identity | why, counts, ms}}}."""
    rows = {k: dict(v) for k, v in _state.get("rows", {}).items()}
    for d in _state.get("dirs", []):
        rows[d.name].update(d.counts, ready=d.ready.is_set(), entries=len(d.known),
                            mutable=sorted(d.mutable),
                            ms={k: round(v, 1) for k, v in d.ms.items()})
    out: dict[str, Any] = {"enabled": bool(_state.get("enabled")), "dirs": rows}
    for k in ("off", "error", "enable_ms"):
        if k in _state:
            out[k] = _state[k]
    return out
