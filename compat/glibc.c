/* SPDX-License-Identifier: Apache-2.0 */
/*
 * What the static programs need of a C library newer than the one they
 * are linked against.
 *
 * `make STATIC=1` links ptxcached and ptxcache against Debian 11's glibc
 * (2.31, mk/sysroot.sh), so that they run on every glibc from 2.28 on:
 * the wheel's manylinux_2_28 tag, PyTorch's own floor. They are compiled
 * with the toolchain's headers, as Debian 12's static libraries in them
 * (LLVM, libstdc++, libgcc) were, and those call a few functions that
 * glibc 2.31 does not have, or has only under a version newer than 2.28.
 * Each is here, with the reason it is safe; mk/wheel_backend.py fails the
 * build if any import newer than the floor is left.
 *
 * - __libc_single_threaded (2.32): libstdc++ skips atomic reference
 *   counts while it is true. Ours says "not single-threaded", always: the
 *   atomic path, correct in every process.
 * - _dl_find_object (2.35): libgcc's unwinder asks it for the object that
 *   holds a return address and that object's PT_GNU_EH_FRAME, with no
 *   fallback once glibc's headers declared it. Ours answers the same
 *   question from dl_iterate_phdr (2.2.5), as libgcc did before 2.35.
 * - arc4random, arc4random_buf (2.36): libstdc++'s random_device,
 *   LLVM's Process::GetRandomNumber and libevent's DNS transaction ids.
 *   From getrandom(2) (glibc 2.25), as glibc's own are; like glibc's,
 *   they cannot fail, so an error other than EINTR aborts.
 * - mallinfo2 (2.33): LLVM's Process::GetMallocUsage, statistics only;
 *   from mallinfo(), whose int fields are enough for what it reports.
 * - exp, log, log2, pow (2.29): the versions 2.29 added only drop the
 *   SVID error-handling wrapper; the numbers are the same function's. The
 *   link renames every call (--wrap, in the Makefile) to the oldest
 *   version, which every glibc has.
 *
 * Nothing here is linked into a build against the host's own glibc.
 */
#include <dlfcn.h>
#include <errno.h>
#include <link.h>
#include <malloc.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

char __libc_single_threaded = 0;

struct find {
	uintptr_t pc;
	struct dl_find_object *out;
};

static int find_object(struct dl_phdr_info *info, size_t size, void *data)
{
	struct find *f = data;
	uintptr_t lo = UINTPTR_MAX, hi = 0;
	const ElfW(Phdr) *eh = NULL;
	int holds = 0;

	for (size_t i = 0; i < info->dlpi_phnum; i++) {
		const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
		if (ph->p_type == PT_GNU_EH_FRAME)
			eh = ph;
		if (ph->p_type != PT_LOAD)
			continue;
		uintptr_t start = info->dlpi_addr + ph->p_vaddr;
		uintptr_t end = start + ph->p_memsz;
		if (f->pc >= start && f->pc < end)
			holds = 1;
		if (start < lo)
			lo = start;
		if (end > hi)
			hi = end;
	}
	if (!holds)
		return 0;
	memset(f->out, 0, sizeof *f->out);
	f->out->dlfo_map_start = (void *)lo;
	f->out->dlfo_map_end = (void *)hi;
	f->out->dlfo_eh_frame = eh ? (void *)(info->dlpi_addr + eh->p_vaddr) : NULL;
	return 1;
}

int _dl_find_object(void *pc, struct dl_find_object *out)
{
	struct find f = { (uintptr_t)pc, out };
	return dl_iterate_phdr(find_object, &f) ? 0 : -1;
}

void arc4random_buf(void *buf, size_t n)
{
	unsigned char *p = buf;
	while (n > 0) {
		ssize_t r = getrandom(p, n, 0);
		if (r < 0) {
			if (errno == EINTR)
				continue;
			abort();
		}
		p += r;
		n -= (size_t)r;
	}
}

uint32_t arc4random(void)
{
	uint32_t v;
	arc4random_buf(&v, sizeof v);
	return v;
}

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
struct mallinfo2 mallinfo2(void)
{
	struct mallinfo m = mallinfo();
	struct mallinfo2 r = {
		.arena = (unsigned)m.arena, .ordblks = (unsigned)m.ordblks,
		.smblks = (unsigned)m.smblks, .hblks = (unsigned)m.hblks,
		.hblkhd = (unsigned)m.hblkhd, .usmblks = (unsigned)m.usmblks,
		.fsmblks = (unsigned)m.fsmblks, .uordblks = (unsigned)m.uordblks,
		.fordblks = (unsigned)m.fordblks, .keepcost = (unsigned)m.keepcost,
	};
	return r;
}
#pragma GCC diagnostic pop

/* The oldest version of each math function: GLIBC_2.2.5 on x86_64, the
 * first glibc of aarch64 (2.17) there. */
#if defined(__x86_64__)
#define OLDEST "GLIBC_2.2.5"
#elif defined(__aarch64__)
#define OLDEST "GLIBC_2.17"
#else
#error "compat/glibc.c: which is the oldest glibc version of this architecture?"
#endif

#define OLD_MATH(name, params, args)                                         \
	double old_##name params;                                            \
	double __wrap_##name params;                                         \
	__asm__(".symver old_" #name "," #name "@" OLDEST);                  \
	double __wrap_##name params { return old_##name args; }

OLD_MATH(exp, (double x), (x))
OLD_MATH(log, (double x), (x))
OLD_MATH(log2, (double x), (x))
OLD_MATH(pow, (double x, double y), (x, y))
