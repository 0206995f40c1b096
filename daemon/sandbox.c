/* SPDX-License-Identifier: Apache-2.0 */
/*
 * sandbox: seccomp (through libseccomp) and Landlock for workers; see
 * sandbox.h for the two profiles. At the end, the master's side: the
 * setting checked against the kernel at start, and what the assembler
 * workers may reach.
 *
 * The codegen allow-list, and why each call is on it:
 *   read, write, readv, writev        the job socket (fd 3), stderr
 *   pread64, lseek, ftruncate         codegen.c's capture of what LLVM
 *                                     prints (a memfd made before this)
 *   close, dup, dup2, dup3, fcntl     capture swaps fd 2 around each job
 *   fstat, newfstatat, statx          stdio and LLVM's raw_fd_ostream on
 *                                     fds they hold (Landlock keeps paths
 *                                     closed)
 *   ioctl(TCGETS) only                isatty() for LLVM's colour choice
 *   mmap, munmap, mremap, mprotect,
 *   brk, madvise                      memory
 *   futex, sched_yield,
 *   sched_getaffinity                 locks; LLVM's thread-count query
 *   rt_sigaction, rt_sigprocmask,
 *   rt_sigreturn, sigaltstack         LLVM's and libc's signal handling
 *   getpid, gettid, getppid, getuid,
 *   getcwd, getrandom, clock_*,
 *   gettimeofday, uname               queries with no effect outside
 *   sysinfo                           glibc's qsort() sizes its buffer by
 *                                     the machine's memory
 *   prlimit64, setrlimit, getrlimit   on itself only (pid 0): RLIMIT_CORE
 *                                     before an expected abort
 *   tgkill, kill, tkill               on itself only: abort() and raise()
 *   exit, exit_group, restart_syscall the end
 * Everything else kills the worker (SIGSYS): openat, socket, connect,
 * execve, clone, fork, ptrace, process_vm_*, kill of another pid, ...
 */
#include "daemon/sandbox.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/landlock.h>
#include <seccomp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <termios.h>
#include <unistd.h>

#include "daemon/log.h"
#include "daemon/worker.h"
#include "daemon/worker_spawn.h"

/* Landlock's ABI beyond what older headers know. */
struct ll_ruleset_attr {
	uint64_t handled_access_fs;
	uint64_t handled_access_net;    /* ABI 4 */
	uint64_t scoped;                /* ABI 6 */
};
#define LL_FS_ABI1 ((1ULL << 13) - 1)   /* EXECUTE .. MAKE_SYM */
#define LL_FS_REFER (1ULL << 13)        /* ABI 2 */
#define LL_FS_TRUNCATE (1ULL << 14)     /* ABI 3 */
#define LL_FS_IOCTL_DEV (1ULL << 15)    /* ABI 5 */
#define LL_NET_TCP ((1ULL << 0) | (1ULL << 1)) /* bind, connect: ABI 4 */
#define LL_SCOPE_ALL ((1ULL << 0) | (1ULL << 1)) /* abstract unix, signal: ABI 6 */
#define LL_FS_READ (LANDLOCK_ACCESS_FS_EXECUTE | LANDLOCK_ACCESS_FS_READ_FILE | \
		    LANDLOCK_ACCESS_FS_READ_DIR)

static int landlock_abi(void)
{
	long v = syscall(__NR_landlock_create_ruleset, NULL, 0, LANDLOCK_CREATE_RULESET_VERSION);
	return v < 0 ? 0 : (int)v;
}

/* Every filesystem right the ABI knows: all denied unless a rule grants. */
static uint64_t fs_rights(int abi)
{
	uint64_t r = LL_FS_ABI1;
	if (abi >= 2)
		r |= LL_FS_REFER;
	if (abi >= 3)
		r |= LL_FS_TRUNCATE;
	if (abi >= 5)
		r |= LL_FS_IOCTL_DEV;
	return r;
}

/* The rights that apply to a file rather than a directory. */
#define LL_FILE_RIGHTS (LANDLOCK_ACCESS_FS_EXECUTE | LANDLOCK_ACCESS_FS_WRITE_FILE | \
			LANDLOCK_ACCESS_FS_READ_FILE | LL_FS_TRUNCATE | LL_FS_IOCTL_DEV)

static int add_path(int ruleset, const char *path, uint64_t access)
{
	struct landlock_path_beneath_attr pb = { .allowed_access = access };
	struct stat st;
	pb.parent_fd = open(path, O_PATH | O_CLOEXEC);
	if (pb.parent_fd < 0)
		return errno == ENOENT ? 0 : -1;   /* a root this system lacks */
	if (fstat(pb.parent_fd, &st) == 0 && !S_ISDIR(st.st_mode))
		pb.allowed_access &= LL_FILE_RIGHTS;
	int r = (int)syscall(__NR_landlock_add_rule, ruleset, LANDLOCK_RULE_PATH_BENEATH, &pb, 0);
	close(pb.parent_fd);
	return r;
}

static int apply_landlock(enum sandbox_profile profile, const struct sandbox_paths *paths,
			  struct buf *missing)
{
	int abi = landlock_abi();
	if (abi < 1) {
		buf_puts(missing, missing->len ? ", landlock" : "landlock");
		return 1;
	}
	struct ll_ruleset_attr attr = { .handled_access_fs = fs_rights(abi) };
	size_t size = sizeof attr.handled_access_fs;
	if (abi >= 4) {
		attr.handled_access_net = LL_NET_TCP;
		size += sizeof attr.handled_access_net;
	}
	if (abi >= 6) {
		attr.scoped = LL_SCOPE_ALL;
		size += sizeof attr.scoped;
	}
	int rs = (int)syscall(__NR_landlock_create_ruleset, &attr, size, 0);
	if (rs < 0) {
		buf_printf(missing, "landlock_create_ruleset: %s", strerror(errno));
		return -1;
	}
	int r = 0;
	if (profile == SANDBOX_ASSEMBLER) {
		for (const char *const *p = paths->read_roots; p && *p && r == 0; p++)
			r = add_path(rs, *p, LL_FS_READ);
		if (r == 0 && paths->write_root)
			r = add_path(rs, paths->write_root, attr.handled_access_fs);
	}
	if (r < 0 || syscall(__NR_landlock_restrict_self, rs, 0) < 0) {
		buf_printf(missing, "landlock: %s", strerror(errno));
		close(rs);
		return -1;
	}
	close(rs);
	if (abi < 6) {
		buf_printf(missing, "%slandlock ABI %d (no TCP rules before 4, no signal scope before 6)",
			   missing->len ? ", " : "", abi);
		return 1;
	}
	return 0;
}

static int allow(scmp_filter_ctx c, int nr)
{
	return seccomp_rule_add(c, SCMP_ACT_ALLOW, nr, 0);
}

static int codegen_filter(scmp_filter_ctx c)
{
	static const int calls[] = {
		SCMP_SYS(read), SCMP_SYS(write), SCMP_SYS(readv), SCMP_SYS(writev),
		SCMP_SYS(pread64), SCMP_SYS(lseek), SCMP_SYS(ftruncate), SCMP_SYS(close),
		SCMP_SYS(dup), SCMP_SYS(dup2), SCMP_SYS(dup3), SCMP_SYS(fcntl),
		SCMP_SYS(fstat), SCMP_SYS(newfstatat), SCMP_SYS(statx),
		SCMP_SYS(mmap), SCMP_SYS(munmap), SCMP_SYS(mremap), SCMP_SYS(mprotect),
		SCMP_SYS(brk), SCMP_SYS(madvise), SCMP_SYS(futex), SCMP_SYS(sched_yield),
		SCMP_SYS(sched_getaffinity), SCMP_SYS(rt_sigaction), SCMP_SYS(rt_sigprocmask),
		SCMP_SYS(rt_sigreturn), SCMP_SYS(sigaltstack), SCMP_SYS(getpid),
		SCMP_SYS(gettid), SCMP_SYS(getppid), SCMP_SYS(getuid), SCMP_SYS(getcwd),
		SCMP_SYS(getrandom), SCMP_SYS(clock_gettime), SCMP_SYS(clock_getres),
		SCMP_SYS(clock_nanosleep), SCMP_SYS(gettimeofday), SCMP_SYS(uname), SCMP_SYS(sysinfo),
		SCMP_SYS(getrlimit), SCMP_SYS(exit), SCMP_SYS(exit_group),
		SCMP_SYS(restart_syscall),
	};
	pid_t self = getpid();
	int r = 0;

	for (size_t i = 0; i < sizeof calls / sizeof calls[0] && r == 0; i++)
		r = allow(c, calls[i]);
	if (r == 0)
		r = seccomp_rule_add(c, SCMP_ACT_ALLOW, SCMP_SYS(ioctl), 1,
				     SCMP_A1(SCMP_CMP_EQ, TCGETS));
	if (r == 0)
		r = seccomp_rule_add(c, SCMP_ACT_ALLOW, SCMP_SYS(prlimit64), 1,
				     SCMP_A0(SCMP_CMP_EQ, 0));
	if (r == 0)
		r = seccomp_rule_add(c, SCMP_ACT_ALLOW, SCMP_SYS(setrlimit), 0);
	if (r == 0)
		r = seccomp_rule_add(c, SCMP_ACT_ALLOW, SCMP_SYS(tgkill), 1,
				     SCMP_A0(SCMP_CMP_EQ, (scmp_datum_t)self));
	if (r == 0)
		r = seccomp_rule_add(c, SCMP_ACT_ALLOW, SCMP_SYS(kill), 1,
				     SCMP_A0(SCMP_CMP_EQ, (scmp_datum_t)self));
	if (r == 0)
		r = seccomp_rule_add(c, SCMP_ACT_ALLOW, SCMP_SYS(tkill), 1,
				     SCMP_A0(SCMP_CMP_EQ, (scmp_datum_t)self));
	return r;
}

static int assembler_filter(scmp_filter_ctx c)
{
	static const int refused[] = {
		SCMP_SYS(socket), SCMP_SYS(ptrace), SCMP_SYS(process_vm_readv),
		SCMP_SYS(process_vm_writev), SCMP_SYS(bpf), SCMP_SYS(perf_event_open),
		SCMP_SYS(keyctl), SCMP_SYS(add_key), SCMP_SYS(request_key),
		SCMP_SYS(mount), SCMP_SYS(umount2), SCMP_SYS(unshare), SCMP_SYS(setns),
	};
	int r = 0;

	for (size_t i = 0; i < sizeof refused / sizeof refused[0] && r == 0; i++)
		r = seccomp_rule_add(c, SCMP_ACT_ERRNO(EACCES), refused[i], 0);
	return r;
}

/* Whether this kernel has seccomp filters, as libseccomp sees it. */
static int have_seccomp(void)
{
	return prctl(PR_GET_SECCOMP, 0, 0, 0, 0) >= 0 && seccomp_api_get() >= 1;
}

static int apply_seccomp(enum sandbox_profile profile, struct buf *missing)
{
	scmp_filter_ctx c = seccomp_init(profile == SANDBOX_CODEGEN ? SCMP_ACT_KILL_PROCESS
								    : SCMP_ACT_ALLOW);
	if (!c) {
		/* No seccomp that libseccomp can use here (qemu-user emulates
		 * none; a kernel without SECCOMP_RET_KILL_PROCESS): missing, as
		 * for EINVAL below, where the master saw none either. */
		if (!have_seccomp()) {
			buf_puts(missing, missing->len ? ", seccomp" : "seccomp");
			return 1;
		}
		buf_puts(missing, missing->len ? ", seccomp_init failed" : "seccomp_init failed");
		return -1;
	}
	int r = profile == SANDBOX_CODEGEN ? codegen_filter(c) : assembler_filter(c);
	if (r == 0)
		r = seccomp_load(c);
	seccomp_release(c);
	if (r < 0) {
		if (r == -EINVAL || r == -ENOSYS || r == -EPERM || r == -EACCES) {
			/* No seccomp here, or a filter above us forbids it. */
			buf_puts(missing, missing->len ? ", seccomp" : "seccomp");
			return 1;
		}
		buf_printf(missing, "seccomp: %s", strerror(-r));
		return -1;
	}
	return 0;
}

int sandbox_apply(enum sandbox_profile profile, const struct sandbox_paths *paths,
		  struct buf *missing)
{
#if defined(__SANITIZE_ADDRESS__)
	(void)profile;
	(void)paths;
	buf_puts(missing, "everything (an AddressSanitizer build)");
	return 1;
#else
	if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0) {
		buf_printf(missing, "no_new_privs: %s", strerror(errno));
		return -1;
	}
	/* Landlock first: its own calls are not on the seccomp allow-list. */
	int l = apply_landlock(profile, paths, missing);
	if (l < 0)
		return -1;
	int s = apply_seccomp(profile, missing);
	if (s < 0)
		return -1;
	return l || s;
#endif
}

int sandbox_support(struct buf *out)
{
	int abi = landlock_abi();
	int seccomp = have_seccomp();
#if defined(__SANITIZE_ADDRESS__)
	buf_puts(out, "off (AddressSanitizer build)");
	return 0;
#endif
	buf_printf(out, "no_new_privs, %s, ", seccomp ? "seccomp" : "no seccomp");
	if (abi)
		buf_printf(out, "landlock ABI %d", abi);
	else
		buf_puts(out, "no landlock");
	return seccomp && abi >= 6;
}

/* ---- the master's side ---------------------------------------------- */

/* Check the sandbox setting against the kernel (refusing to start where
 * `require` cannot be met) and name the assembler's own trees, which its
 * workers may read: ptxas's directory and nvJitLink's. */
int sandbox_start(struct pool_config *pc, const char *cache_dir,
		  const char *const asm_paths[2], char **asm_roots,
		  char **worker_tmp, struct buf *err)
{
	struct buf have = BUF_INIT, roots = BUF_INIT;
	const char *mode = pc->sandbox ? pc->sandbox : "auto";
	int all = sandbox_support(&have);

	if (strcmp(mode, "auto") && strcmp(mode, "require") && strcmp(mode, "off")) {
		buf_printf(err, "sandbox must be auto, require or off, not '%s'", mode);
		buf_free(&have);
		return -1;
	}
	if (!strcmp(mode, "require") && !all) {
		buf_printf(err, "sandbox = require, but this kernel offers only: %s", have.data);
		buf_free(&have);
		return -1;
	}
	if (!strcmp(mode, "off"))
		log_warn("worker sandbox is off: a worker compromised by hostile IR has the "
			 "daemon's privileges");
	else if (!all)
		log_warn("worker sandbox incomplete on this kernel: %s", have.data);
	else
		log_info("worker sandbox: %s", have.data);
	buf_free(&have);
	for (int b = 0; b < 2; b++) {
		const char *p = asm_paths[b], *slash = p ? strrchr(p, '/') : NULL;
		if (slash && slash != p)
			buf_printf(&roots, "%.*s\n", (int)(slash - p), p);
	}
	free(*asm_roots);
	*asm_roots = buf_detach(&roots, NULL);
	pc->asm_roots = *asm_roots;
	free(*worker_tmp);
	if (asprintf(worker_tmp, "%s/workers", cache_dir) < 0) {
		*worker_tmp = NULL;
		buf_puts(err, "out of memory");
		return -1;
	}
	pc->tmp_parent = *worker_tmp;
	return pool_prepare_tmp(*worker_tmp, err);
}
