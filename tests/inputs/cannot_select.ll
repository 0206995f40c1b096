; redux.sync needs sm_80 or newer: on sm_70 NVPTX instruction selection has
; no pattern for it, and LLVM aborts with "Cannot select" (as llc does).
target triple = "nvptx64-nvidia-cuda"

declare i32 @llvm.nvvm.redux.sync.add(i32, i32)

define ptx_kernel void @warp_sum(ptr addrspace(1) %out, i32 %v) {
  %s = call i32 @llvm.nvvm.redux.sync.add(i32 %v, i32 -1)
  store i32 %s, ptr addrspace(1) %out
  ret void
}
