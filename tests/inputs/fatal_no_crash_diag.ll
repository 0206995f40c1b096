; NVPTX has no "agent" synchronization scope. LLVM reports it with
; report_fatal_error(..., gen_crash_diag = false): llc prints
; "LLVM ERROR: ..." and exits with status 1 instead of aborting.
target triple = "nvptx64-nvidia-cuda"

define ptx_kernel void @agent_fence(ptr addrspace(1) %p) {
  fence syncscope("agent") seq_cst
  store i32 1, ptr addrspace(1) %p
  ret void
}
