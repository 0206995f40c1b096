#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Proof of the cubin stage on a real GPU (an NVIDIA H200 with CUDA 13,
PyTorch and Triton). Not part of `make test`: run it on the GPU machine,
with a static build of the daemon and CLI (see tests/gpu/README.md):

    python3 tests/gpu/h200.py --bin DIR --corpus corpus.tar.gz --out OUTDIR

Part 1: kernels of known meaning (vector add, a warp-shuffle reduction, a
matmul; LLVM IR below) compiled by ptxcache to PTX and to cubin, each loaded
with the CUDA driver API (ctypes, libcuda), launched and checked against a
CPU reference; every corpus kernel compiled IR -> PTX -> cubin through the
daemon and loaded on the GPU.

Part 2: a real Triton run with TRITON_PTXAS_PATH pointing at the front:
results equal to a run with the real ptxas (bit for bit, and the cubins
in Triton's cache byte-identical), and a second process with an empty
Triton cache gets its cubins from ptxcache (hits in stats, no new compile).

Prints one line per check and writes summary.json to OUTDIR.
"""
import argparse
import ctypes
import glob
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time

import numpy as np

HEAD = 'target triple = "nvptx64-nvidia-cuda"\n' + "".join(
    "declare i32 @llvm.nvvm.read.ptx.sreg.%s()\n" % r
    for r in ("tid.x", "tid.y", "ctaid.x", "ctaid.y", "ntid.x", "ntid.y", "nctaid.x"))

VADD = HEAD + """
define ptx_kernel void @vadd(ptr addrspace(1) %a, ptr addrspace(1) %b, ptr addrspace(1) %c, i32 %n) {
entry:
  %t = call i32 @llvm.nvvm.read.ptx.sreg.tid.x()
  %bi = call i32 @llvm.nvvm.read.ptx.sreg.ctaid.x()
  %bd = call i32 @llvm.nvvm.read.ptx.sreg.ntid.x()
  %m = mul i32 %bi, %bd
  %i = add i32 %m, %t
  %ok = icmp slt i32 %i, %n
  br i1 %ok, label %body, label %done
body:
  %ix = sext i32 %i to i64
  %pa = getelementptr float, ptr addrspace(1) %a, i64 %ix
  %pb = getelementptr float, ptr addrspace(1) %b, i64 %ix
  %pc = getelementptr float, ptr addrspace(1) %c, i64 %ix
  %va = load float, ptr addrspace(1) %pa
  %vb = load float, ptr addrspace(1) %pb
  %s = fadd float %va, %vb
  store float %s, ptr addrspace(1) %pc
  br label %done
done:
  ret void
}
"""

# Grid-stride partial sums, a warp shuffle tree, one atomic add per warp.
REDUCE = HEAD + """
declare i32 @llvm.nvvm.shfl.sync.down.i32(i32, i32, i32, i32)
define ptx_kernel void @reduce_sum(ptr addrspace(1) %a, ptr addrspace(1) %out, i32 %n) {
entry:
  %t = call i32 @llvm.nvvm.read.ptx.sreg.tid.x()
  %bi = call i32 @llvm.nvvm.read.ptx.sreg.ctaid.x()
  %bd = call i32 @llvm.nvvm.read.ptx.sreg.ntid.x()
  %gd = call i32 @llvm.nvvm.read.ptx.sreg.nctaid.x()
  %m = mul i32 %bi, %bd
  %i0 = add i32 %m, %t
  %stride = mul i32 %bd, %gd
  br label %loop
loop:
  %i = phi i32 [ %i0, %entry ], [ %inext, %body ]
  %acc = phi i32 [ 0, %entry ], [ %acc2, %body ]
  %more = icmp slt i32 %i, %n
  br i1 %more, label %body, label %warp
body:
  %ix = sext i32 %i to i64
  %p = getelementptr i32, ptr addrspace(1) %a, i64 %ix
  %v = load i32, ptr addrspace(1) %p
  %acc2 = add i32 %acc, %v
  %inext = add i32 %i, %stride
  br label %loop
warp:
  %s16 = call i32 @llvm.nvvm.shfl.sync.down.i32(i32 -1, i32 %acc, i32 16, i32 31)
  %r16 = add i32 %acc, %s16
  %s8 = call i32 @llvm.nvvm.shfl.sync.down.i32(i32 -1, i32 %r16, i32 8, i32 31)
  %r8 = add i32 %r16, %s8
  %s4 = call i32 @llvm.nvvm.shfl.sync.down.i32(i32 -1, i32 %r8, i32 4, i32 31)
  %r4 = add i32 %r8, %s4
  %s2 = call i32 @llvm.nvvm.shfl.sync.down.i32(i32 -1, i32 %r4, i32 2, i32 31)
  %r2 = add i32 %r4, %s2
  %s1 = call i32 @llvm.nvvm.shfl.sync.down.i32(i32 -1, i32 %r2, i32 1, i32 31)
  %r1 = add i32 %r2, %s1
  %lane = and i32 %t, 31
  %first = icmp eq i32 %lane, 0
  br i1 %first, label %add, label %done
add:
  %old = atomicrmw add ptr addrspace(1) %out, i32 %r1 monotonic
  br label %done
done:
  ret void
}
"""

# C[M,N] = A[M,K] * B[K,N], row-major fp32, one thread per element of C.
MATMUL = HEAD + """
define ptx_kernel void @matmul(ptr addrspace(1) %A, ptr addrspace(1) %B, ptr addrspace(1) %C, i32 %M, i32 %N, i32 %K) {
entry:
  %tx = call i32 @llvm.nvvm.read.ptx.sreg.tid.x()
  %ty = call i32 @llvm.nvvm.read.ptx.sreg.tid.y()
  %bx = call i32 @llvm.nvvm.read.ptx.sreg.ctaid.x()
  %by = call i32 @llvm.nvvm.read.ptx.sreg.ctaid.y()
  %dx = call i32 @llvm.nvvm.read.ptx.sreg.ntid.x()
  %dy = call i32 @llvm.nvvm.read.ptx.sreg.ntid.y()
  %cx = mul i32 %bx, %dx
  %col = add i32 %cx, %tx
  %cy = mul i32 %by, %dy
  %row = add i32 %cy, %ty
  %okc = icmp slt i32 %col, %N
  %okr = icmp slt i32 %row, %M
  %ok = and i1 %okc, %okr
  br i1 %ok, label %loop, label %done
loop:
  %k = phi i32 [ 0, %entry ], [ %k1, %loop ]
  %acc = phi float [ 0.0, %entry ], [ %acc1, %loop ]
  %ra = mul i32 %row, %K
  %ia = add i32 %ra, %k
  %rb = mul i32 %k, %N
  %ib = add i32 %rb, %col
  %ia64 = sext i32 %ia to i64
  %ib64 = sext i32 %ib to i64
  %pa = getelementptr float, ptr addrspace(1) %A, i64 %ia64
  %pb = getelementptr float, ptr addrspace(1) %B, i64 %ib64
  %va = load float, ptr addrspace(1) %pa
  %vb = load float, ptr addrspace(1) %pb
  %p = fmul float %va, %vb
  %acc1 = fadd float %acc, %p
  %k1 = add i32 %k, 1
  %more = icmp slt i32 %k1, %K
  br i1 %more, label %loop, label %store
store:
  %rc = mul i32 %row, %N
  %ic = add i32 %rc, %col
  %ic64 = sext i32 %ic to i64
  %pc = getelementptr float, ptr addrspace(1) %C, i64 %ic64
  store float %acc1, ptr addrspace(1) %pc
  br label %done
done:
  ret void
}
"""

TRITON_PROG = r'''
import sys, torch, triton, triton.language as tl

@triton.jit
def add_k(x, y, o, n, B: tl.constexpr):
    i = tl.program_id(0) * B + tl.arange(0, B)
    m = i < n
    tl.store(o + i, tl.load(x + i, mask=m) + tl.load(y + i, mask=m), mask=m)

@triton.jit
def softmax_k(o, x, stride, n, B: tl.constexpr):
    r = tl.program_id(0)
    c = tl.arange(0, B)
    v = tl.load(x + r * stride + c, mask=c < n, other=-float("inf"))
    v = v - tl.max(v, 0)
    e = tl.exp(v)
    tl.store(o + r * stride + c, e / tl.sum(e, 0), mask=c < n)

@triton.jit
def matmul_k(a, b, c, M, N, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    pm, pn = tl.program_id(0), tl.program_id(1)
    rm = pm * BM + tl.arange(0, BM)
    rn = pn * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in range(0, K, BK):
        x = tl.load(a + rm[:, None] * K + (k + rk)[None, :])
        y = tl.load(b + (k + rk)[:, None] * N + rn[None, :])
        acc += tl.dot(x, y)
    tl.store(c + rm[:, None] * N + rn[None, :], acc)

torch.manual_seed(0)
dev = "cuda"
x = torch.randn(1 << 20, device=dev); y = torch.randn(1 << 20, device=dev)
o = torch.empty_like(x)
add_k[(triton.cdiv(x.numel(), 1024),)](x, y, o, x.numel(), B=1024)
s_in = torch.randn(512, 1000, device=dev); s_out = torch.empty_like(s_in)
softmax_k[(512,)](s_out, s_in, s_in.stride(0), 1000, B=1024)
a = torch.randn(512, 512, device=dev, dtype=torch.float16)
b = torch.randn(512, 512, device=dev, dtype=torch.float16)
c = torch.empty(512, 512, device=dev, dtype=torch.float32)
matmul_k[(4, 4)](a, b, c, 512, 512, 512, BM=128, BN=128, BK=32)
torch.cuda.synchronize()
ok = (torch.equal(o, x + y) and torch.allclose(s_out, torch.softmax(s_in, 1), atol=1e-5)
      and torch.allclose(c, (a.float() @ b.float()), atol=1e-2, rtol=1e-3))
torch.save({"add": o.cpu(), "softmax": s_out.cpu(), "matmul": c.cpu()}, sys.argv[1])
print("triton results match torch:", ok)
sys.exit(0 if ok else 1)
'''

results = {}
failures = []
# PTX ISA 8.7 throughout: Triton 3.6's own ptxas (CUDA 12.8), which the
# daemon uses so that the Triton run compares like with like, takes no
# newer PTX.
ISA = "87"


def check(name, ok, detail=""):
    print("%-4s %s %s" % ("ok" if ok else "FAIL", name, detail), flush=True)
    results[name] = {"ok": bool(ok), "detail": detail}
    if not ok:
        failures.append(name)


# ---- the CUDA driver API through ctypes ---------------------------------

class Cuda:
    def __init__(self):
        self.lib = ctypes.CDLL("libcuda.so.1")
        self.call("cuInit", 0)
        dev = ctypes.c_int()
        self.call("cuDeviceGet", ctypes.byref(dev), 0)
        self.ctx = ctypes.c_void_p()
        self.call("cuDevicePrimaryCtxRetain", ctypes.byref(self.ctx), dev)
        self.call("cuCtxSetCurrent", self.ctx)
        name = ctypes.create_string_buffer(128)
        self.call("cuDeviceGetName", name, 128, dev)
        self.name = name.value.decode()

    def call(self, fn, *args):
        r = getattr(self.lib, fn)(*args)
        if r != 0:
            s = ctypes.c_char_p()
            self.lib.cuGetErrorString(r, ctypes.byref(s))
            raise RuntimeError("%s failed: %d %s" % (fn, r, s.value))

    def load(self, image, fn):
        mod = ctypes.c_void_p()
        buf = ctypes.create_string_buffer(image, len(image) + 1)
        self.call("cuModuleLoadData", ctypes.byref(mod), buf)
        f = ctypes.c_void_p()
        self.call("cuModuleGetFunction", ctypes.byref(f), mod, fn.encode())
        return mod, f

    def alloc(self, arr):
        p = ctypes.c_uint64()
        self.call("cuMemAlloc_v2", ctypes.byref(p), ctypes.c_size_t(max(arr.nbytes, 4)))
        self.call("cuMemcpyHtoD_v2", p, arr.ctypes.data_as(ctypes.c_void_p), ctypes.c_size_t(arr.nbytes))
        return p

    def get(self, p, arr):
        self.call("cuMemcpyDtoH_v2", arr.ctypes.data_as(ctypes.c_void_p), p, ctypes.c_size_t(arr.nbytes))
        return arr

    def launch(self, f, grid, block, args):
        vals = [a if isinstance(a, ctypes.c_uint64) else ctypes.c_int32(a) for a in args]
        ptrs = (ctypes.c_void_p * len(vals))(*[ctypes.cast(ctypes.byref(v), ctypes.c_void_p) for v in vals])
        self.call("cuLaunchKernel", f, grid[0], grid[1], 1, block[0], block[1], 1, 0, None, ptrs, None)
        self.call("cuCtxSynchronize")


# ---- the daemon -----------------------------------------------------------

class Daemon:
    def __init__(self, bindir, tmp, ptxas, workers):
        self.cli = os.path.join(bindir, "ptxcache")
        self.sock = os.path.join(tmp, "run", "ptxcached.sock")
        self.env = dict(os.environ, PTXCACHE_SOCKET=self.sock, PTXCACHE_PTXAS=ptxas)
        self.log = open(os.path.join(tmp, "daemon.log"), "wb")
        self.proc = subprocess.Popen([os.path.join(bindir, "ptxcached"), "--socket", self.sock,
                                      "--cache-dir", os.path.join(tmp, "cache"),
                                      "--workers", str(workers)],
                                     stdout=self.log, stderr=self.log, env=self.env)
        for _ in range(600):
            if subprocess.run([self.cli, "ping"], env=self.env, capture_output=True).returncode == 0:
                return
            time.sleep(0.1)
        raise RuntimeError("daemon did not start")

    def run(self, *args, input=None):
        r = subprocess.run([self.cli] + list(args), env=self.env, capture_output=True, input=input)
        if r.returncode != 0:
            raise RuntimeError("ptxcache %s: %s %s" % (" ".join(args[:3]), r.stderr.decode(), r.stdout[:300]))
        return r.stdout

    def stats(self):
        return json.loads(self.run("stats", "--json"))

    def stop(self):
        self.proc.terminate()
        self.proc.wait(timeout=60)


def compile_both(d, tmp, name, ir):
    src = os.path.join(tmp, name + ".ll")
    with open(src, "w") as f:
        f.write(ir)
    ptx = d.run("compile", "--arch", "sm_90a", "--ptx-isa", ISA, "-O3", src)
    cub = os.path.join(tmp, name + ".cubin")
    d.run("compile", "--cubin", "--arch", "sm_90a", "--ptx-isa", ISA, "-O3", "-o", cub, src)
    with open(cub, "rb") as f:
        return ptx, f.read()


def part1(d, cu, tmp, corpus):
    rng = np.random.default_rng(0)
    ptx, cubin = compile_both(d, tmp, "vadd", VADD)
    n = 1 << 20
    a = rng.standard_normal(n, dtype=np.float32)
    b = rng.standard_normal(n, dtype=np.float32)
    for kind, image in (("ptx", ptx), ("cubin", cubin)):
        _, f = cu.load(image, "vadd")
        pa, pb, pc = cu.alloc(a), cu.alloc(b), cu.alloc(np.zeros(n, np.float32))
        cu.launch(f, ((n + 255) // 256, 1), (256, 1), [pa, pb, pc, n])
        c = cu.get(pc, np.empty(n, np.float32))
        check("vadd_%s" % kind, np.array_equal(c, a + b), "n=%d" % n)

    ptx, cubin = compile_both(d, tmp, "reduce", REDUCE)
    v = rng.integers(0, 100, n, dtype=np.int32)
    for kind, image in (("ptx", ptx), ("cubin", cubin)):
        _, f = cu.load(image, "reduce_sum")
        pv, po = cu.alloc(v), cu.alloc(np.zeros(1, np.int32))
        cu.launch(f, (264, 1), (256, 1), [pv, po, n])
        got = int(cu.get(po, np.zeros(1, np.int32))[0])
        check("reduce_%s" % kind, got == int(v.sum()), "sum=%d want %d" % (got, int(v.sum())))

    ptx, cubin = compile_both(d, tmp, "matmul", MATMUL)
    M, N, K = 384, 320, 256
    A = rng.standard_normal((M, K), dtype=np.float32)
    B = rng.standard_normal((K, N), dtype=np.float32)
    want = A.astype(np.float64) @ B.astype(np.float64)
    for kind, image in (("ptx", ptx), ("cubin", cubin)):
        _, f = cu.load(image, "matmul")
        pa, pb, pc = cu.alloc(A), cu.alloc(B), cu.alloc(np.zeros((M, N), np.float32))
        cu.launch(f, ((N + 15) // 16, (M + 15) // 16), (16, 16), [pa, pb, pc, M, N, K])
        C = cu.get(pc, np.empty((M, N), np.float32))
        err = float(np.max(np.abs(C - want)))
        check("matmul_%s" % kind, err < 1e-3, "max abs err %.2e" % err)

    # Every corpus kernel, IR -> PTX -> cubin through both cached stages,
    # loaded on the GPU; a second pass is all hits.
    cdir = os.path.join(tmp, "corpus")
    with tarfile.open(corpus) as t:
        t.extractall(cdir)
    man = {}
    with open(os.path.join(cdir, "triton", "MANIFEST.tsv")) as f:
        next(f)
        for line in f:
            p = line.rstrip("\n").split("\t")
            man[p[0]] = p[1]
    loaded = 0
    s0 = d.stats()
    t0 = time.time()
    for ll in sorted(man):
        out = os.path.join(tmp, "k.cubin")
        try:
            d.run("compile", "--cubin", "--arch", "sm_90a", "--ptx-isa", ISA, "-O3", "-o", out,
                  os.path.join(cdir, "triton", ll))
            with open(out, "rb") as f:
                cu.load(f.read(), man[ll])
            loaded += 1
        except Exception as e:
            print("corpus kernel %s: %s" % (ll, str(e)[:300]), flush=True)
    t1 = time.time()
    s1 = d.stats()
    for ll in sorted(man):
        subprocess.run([d.cli, "compile", "--cubin", "--arch", "sm_90a", "--ptx-isa", ISA, "-O3",
                        "-o", os.devnull, os.path.join(cdir, "triton", ll)], env=d.env,
                       capture_output=True)
    t2 = time.time()
    s2 = d.stats()
    check("corpus_cubins_load", loaded == len(man),
          "%d kernels IR->PTX->cubin, loaded with cuModuleLoadData; %.1f s cold" % (loaded, t1 - t0))
    check("corpus_repeat_hits", s2["compiles"] == s1["compiles"] and s2["hits"] - s1["hits"] >= loaded,
          "repeat of %d: %d hits, %d compiles, %.2f s" % (len(man), s2["hits"] - s1["hits"],
                                                          s2["compiles"] - s1["compiles"], t2 - t1))
    results["corpus"] = {"kernels": len(man), "cold_s": t1 - t0, "warm_s": t2 - t1,
                         "compiles": s1["compiles"] - s0["compiles"]}


def triton_ptxas():
    """The ptxas Triton runs by default: its own bundled one, else CUDA's."""
    try:
        import triton.backends.nvidia as nv
        p = os.path.join(os.path.dirname(nv.__file__), "bin", "ptxas")
        if os.path.isfile(p):
            return p
    except Exception:
        pass
    for p in ("/usr/local/cuda/bin/ptxas", shutil.which("ptxas") or ""):
        if p and os.path.isfile(p):
            return p
    raise RuntimeError("no ptxas")


def run_triton(tmp, tag, ptxas_path, extra_env=None):
    # Written once: with -lineinfo, ptxas copies the source file's mtime
    # into the cubin, so a rewritten prog.py is a different cubin.
    prog = os.path.join(tmp, "prog.py")
    if not os.path.exists(prog):
        with open(prog, "w") as f:
            f.write(TRITON_PROG)
    cache = os.path.join(tmp, "triton-cache-" + tag)
    env = dict(os.environ, TRITON_PTXAS_PATH=ptxas_path, TRITON_CACHE_DIR=cache,
               **(extra_env or {}))
    out = os.path.join(tmp, tag + ".pt")
    t0 = time.time()
    r = subprocess.run([sys.executable, prog, out], env=env, capture_output=True, text=True)
    dt = time.time() - t0
    print(r.stdout.strip(), r.stderr.strip()[-2000:], flush=True)
    cubins = {}
    for p in glob.glob(os.path.join(cache, "*", "*.cubin")):
        with open(p, "rb") as f:
            cubins[os.path.basename(p)] = f.read()
    return r.returncode, out, cubins, dt


def part2(d, tmp, bindir, real):
    import torch
    front_dir = os.path.join(tmp, "front")
    os.makedirs(front_dir)
    front = os.path.join(front_dir, "ptxas")
    os.symlink(os.path.join(bindir, "ptxcache"), front)
    env = {"PTXCACHE_SOCKET": d.sock, "PTXCACHE_PTXAS": real}
    v_real = subprocess.run([real, "--version"], capture_output=True).stdout
    v_front = subprocess.run([front, "--version"], capture_output=True, env=dict(os.environ, **env)).stdout
    check("front_version_exact", v_real == v_front, v_front.decode().strip().splitlines()[-1])

    rc0, out0, cub0, t_real = run_triton(tmp, "real", real)
    check("triton_real_ptxas_run", rc0 == 0, "%d cubins, %.1f s" % (len(cub0), t_real))
    s0 = d.stats()
    rc1, out1, cub1, t_front1 = run_triton(tmp, "front1", front, env)
    s1 = d.stats()
    check("triton_front_run", rc1 == 0, "%d cubins, %.1f s; daemon misses +%d compiles +%d" % (
        len(cub1), t_front1, s1["misses"] - s0["misses"], s1["compiles"] - s0["compiles"]))
    a, b = torch.load(out0), torch.load(out1)
    check("triton_results_equal", all(torch.equal(a[k], b[k]) for k in a), "add, softmax, matmul bit for bit")
    same = sorted(cub0) == sorted(cub1) and all(cub0[k] == cub1[k] for k in cub0)
    check("triton_cubins_identical", same and len(cub0) > 0,
          "%d cubins in Triton's cache, byte-identical to the real ptxas's" % len(cub0))
    if not same:
        with tarfile.open(os.path.join(OUTDIR, "triton_caches.tgz"), "w:gz") as t:
            for tag in ("real", "front1"):
                t.add(os.path.join(tmp, "triton-cache-" + tag), arcname=tag)
    rc2, out2, cub2, t_front2 = run_triton(tmp, "front2", front, env)
    s2 = d.stats()
    hits = s2["hits"] - s1["hits"]
    check("triton_second_process_hits", rc2 == 0 and hits >= len(cub1) and s2["compiles"] == s1["compiles"],
          "empty Triton cache: %d hits, %d compiles in the daemon, %.1f s" % (
              hits, s2["compiles"] - s1["compiles"], t_front2))
    c = torch.load(out2)
    check("triton_second_results_equal", all(torch.equal(a[k], c[k]) for k in a))
    results["triton"] = {"real_s": t_real, "front_cold_s": t_front1, "front_warm_s": t_front2,
                         "cubins": len(cub0), "stats_after": s2}


def per_kernel_speed(d, tmp, real, bindir, corpus_dir):
    """Repeat speed of the front against a real ptxas process, per kernel,
    over the whole corpus; and a miss through nvJitLink in the worker
    against one through a ptxas process (compile_us, the worker's time)."""
    front = os.path.join(tmp, "front", "ptxas")
    env = dict(os.environ, PTXCACHE_SOCKET=d.sock, PTXCACHE_PTXAS=real)
    ptxs = []
    for ll in sorted(glob.glob(os.path.join(corpus_dir, "triton", "*.ll"))):
        p = os.path.join(tmp, os.path.basename(ll)[:-3] + ".ptx")
        with open(p, "wb") as f:
            f.write(d.run("compile", "--arch", "sm_90a", "--ptx-isa", ISA, "-O3", ll))
        ptxs.append(p)
    t_real = t_hit = t_true = 0.0
    ratios = []
    for p in ptxs:
        args = ["-lineinfo", "-v", "--gpu-name=sm_90a", p, "-o", p + ".o"]
        t0 = time.time()
        subprocess.run([real] + args, capture_output=True, check=True)
        a = time.time() - t0
        subprocess.run([front] + args, capture_output=True, env=env, check=True)
        t0 = time.time()
        subprocess.run([front] + args, capture_output=True, env=env, check=True)
        b = time.time() - t0
        t0 = time.time()
        subprocess.run(["/bin/true"])
        t_true += time.time() - t0
        t_real += a
        t_hit += b
        ratios.append(a / b)
    n = len(ptxs)
    if not n or not t_hit:
        raise RuntimeError("no kernels to time")
    ratios.sort()
    check("front_repeat_speed", True,
          "%d kernels: real ptxas %.1f ms/kernel, front hit %.2f ms/kernel (/bin/true %.2f ms): "
          "%.0fx in all, per-kernel median %.0fx, min %.0fx" % (
              n, 1e3 * t_real / n, 1e3 * t_hit / n, 1e3 * t_true / n, t_real / t_hit,
              ratios[n // 2], ratios[0]))
    results["speed"] = {"kernels": n, "real_ms": 1e3 * t_real / n, "hit_ms": 1e3 * t_hit / n,
                        "true_ms": 1e3 * t_true / n, "median_ratio": ratios[n // 2]}
    us = {"ptxas": 0, "nvjitlink": 0}
    m = 0
    for p in ptxs[:40]:
        got = {}
        for be in ("nvjitlink", "ptxas"):
            r = subprocess.run([d.cli, "compile", "--cubin", "--backend", be, "--arch", "sm_90a",
                                "--json", "-o", os.devnull, p], env=d.env, capture_output=True)
            j = json.loads(r.stdout or b"{}")
            if j.get("status") != "ok" or j.get("cached"):
                break
            got[be] = j["compile_us"]
        if len(got) == 2:
            m += 1
            for be in got:
                us[be] += got[be]
    if m:
        check("nvjitlink_miss_vs_ptxas_process", True, "%d kernels: nvJitLink in process %.1f ms, "
              "ptxas process %.1f ms per miss (worker time)" % (m, us["nvjitlink"] / m / 1e3,
                                                                 us["ptxas"] / m / 1e3))
        results["nvjitlink"] = {"kernels": m, "nvjitlink_ms": us["nvjitlink"] / m / 1e3,
                                "ptxas_ms": us["ptxas"] / m / 1e3}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True)
    ap.add_argument("--corpus", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--workers", type=int, default=8)
    o = ap.parse_args()
    global OUTDIR
    bindir = os.path.abspath(o.bin)
    os.makedirs(o.out, exist_ok=True)
    OUTDIR = o.out
    tmp = tempfile.mkdtemp(prefix="ptxcache-gpu-")
    real = triton_ptxas()
    print("ptxas:", real, flush=True)
    d = Daemon(bindir, tmp, real, o.workers)
    try:
        cu = Cuda()
        print("device:", cu.name, flush=True)
        results["device"] = cu.name
        results["ptxas"] = real
        for part in (lambda: part1(d, cu, tmp, o.corpus), lambda: part2(d, tmp, bindir, real),
                     lambda: per_kernel_speed(d, tmp, real, bindir, os.path.join(tmp, "corpus"))):
            try:
                part()
            except Exception as e:
                import traceback
                traceback.print_exc()
                check("exception", False, repr(e))
        results["stats"] = d.stats()
    finally:
        d.stop()
        shutil.copy(os.path.join(tmp, "daemon.log"), os.path.join(o.out, "daemon.log"))
        results["failures"] = failures
        with open(os.path.join(o.out, "summary.json"), "w") as f:
            json.dump(results, f, indent=1, default=str)
    print("%d checks, %d failed" % (len([k for k in results if isinstance(results[k], dict) and "ok" in results[k]]),
                                    len(failures)))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
