; Parses, but does not verify: an instruction that uses its own value
; outside a phi. llc reports it after opening its output file, which it
; leaves behind, empty.
target triple = "nvptx64-nvidia-cuda"

define void @self_reference() {
entry:
  %x = add i32 %x, 1
  ret void
}
