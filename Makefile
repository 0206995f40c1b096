# SPDX-License-Identifier: Apache-2.0
# ptxcache build. `make` builds everything into build/; `make test` runs every
# test; `make run` starts the daemon on its defaults; `make deps` installs the
# Debian packages the build needs (as root) or says which ones are missing.

LLVM_CONFIG ?= $(shell command -v llvm-config-22 || echo /usr/lib/llvm-22/bin/llvm-config)
LLVM_BIN    := $(shell $(LLVM_CONFIG) --bindir 2>/dev/null)
PKGS        := sqlite3 libevent msgpack libzstd libcrypto hiredis libxxhash libseccomp
B           := build
VERSION     := 0.2.0

CC      ?= cc
CXX     ?= c++
WARN    := -Wall -Wextra -Wshadow -Wstrict-prototypes -Wmissing-prototypes \
           -Wno-unused-parameter
CFLAGS  ?= -O2 -g
CFLAGS  += -std=gnu11 $(WARN) -I. -fPIC -D_GNU_SOURCE -DPTXCACHE_VERSION='"$(VERSION)"'
ifdef WERROR
CFLAGS  += -Werror
endif
ifdef SANITIZE
CFLAGS  += -fsanitize=$(SANITIZE) -fno-omit-frame-pointer
LDFLAGS += -fsanitize=$(SANITIZE)
endif

DEP_CFLAGS = $(shell pkg-config --cflags $(PKGS) 2>/dev/null)
DEP_LIBS   = $(shell pkg-config --libs $(PKGS) 2>/dev/null)
CLI_LIBS   = -lmsgpackc $(shell pkg-config --libs json-c 2>/dev/null)
BENCH_LIBS = -lmsgpackc -lcrypto -lm

# LLVM is linked statically into the daemon alone: faster start-up and a
# binary that can be carried to a machine without Debian's LLVM. Clients
# never link LLVM.
LLVM_COMPONENTS := nvptx irreader bitreader bitwriter passes linker ipo
LLVM_CFLAGS = $(shell $(LLVM_CONFIG) --cflags 2>/dev/null)
LLVM_CXXFLAGS = $(shell $(LLVM_CONFIG) --cxxflags 2>/dev/null)
LLVM_LIBS = $(shell $(LLVM_CONFIG) --link-static --ldflags --libs $(LLVM_COMPONENTS) 2>/dev/null) \
            $(shell $(LLVM_CONFIG) --link-static --system-libs 2>/dev/null)

DAEMON_LIBS = $(LLVM_LIBS) $(DEP_LIBS) -lpthread

# STATIC=1: every library but glibc linked statically (libstdc++ too), for
# programs that run on any Linux with glibc 2.28 or later (the wheel, the
# tarball, the image, the GPU proof: tests/gpu/README.md):
#   make STATIC=1 B=build-static build-static/ptxcached build-static/ptxcache
# They link against Debian 11's glibc 2.31 (mk/sysroot.sh: Debian packages,
# fetched once into $(SYSROOT)), with compat/glibc.c for the few symbols
# that 2.31 lacks or versions after 2.28; mk/wheel_backend.py checks that
# nothing newer than GLIBC_2.28 is imported. ARCH=aarch64 cross-compiles
# with Debian's gcc-aarch64-linux-gnu against Debian 12's arm64 packages
# (LLVM 22's included). SYSROOT= (empty) links against this host's glibc.
ifdef STATIC
HOST_ARCH   := $(shell uname -m)
ARCH        ?= $(HOST_ARCH)
TRIPLET     := $(ARCH)-linux-gnu
# The roots built from Debian packages (the sysroots, the Debian 11 test
# root): kept across runs; CI points them outside the clone it tests.
PTXCACHE_ROOTS ?= $(CURDIR)/build/roots
SYSROOT     ?= $(PTXCACHE_ROOTS)/sysroot-$(ARCH)
SYSLIBS     := -ldl -lm -lrt -lpthread -pthread
static_libs  = -Wl,-Bstatic $(filter-out $(SYSLIBS) %.so,$(1)) -Wl,-Bdynamic -ldl -lm -lrt -lpthread
DEP_LIBS     = $(shell pkg-config --static --libs $(PKGS) 2>/dev/null)
DAEMON_LIBS  = $(call static_libs,$(LLVM_LIBS) $(DEP_LIBS))
CLI_LIBS     = $(call static_libs,-lmsgpackc $(shell pkg-config --static --libs json-c 2>/dev/null))
BENCH_LIBS   = $(call static_libs,-lmsgpackc $(shell pkg-config --static --libs libcrypto 2>/dev/null))
LDFLAGS     += -static-libstdc++ -static-libgcc
ifneq ($(ARCH),$(HOST_ARCH))
CC          := $(TRIPLET)-gcc
CXX         := $(TRIPLET)-g++
DEPROOT     := $(SYSROOT)/deps/root
LLVM_HOST   := $(shell $(LLVM_CONFIG) --prefix 2>/dev/null)
LLVM_CFLAGS   = $(subst $(LLVM_HOST),$(DEPROOT)$(LLVM_HOST),$(shell $(LLVM_CONFIG) --cflags 2>/dev/null))
LLVM_CXXFLAGS = $(subst $(LLVM_HOST),$(DEPROOT)$(LLVM_HOST),$(shell $(LLVM_CONFIG) --cxxflags 2>/dev/null))
LLVM_LIBS     = $(subst $(LLVM_HOST),$(DEPROOT)$(LLVM_HOST),$(shell $(LLVM_CONFIG) --link-static --ldflags --libs $(LLVM_COMPONENTS) 2>/dev/null)) \
                $(shell $(LLVM_CONFIG) --link-static --system-libs 2>/dev/null)
export PKG_CONFIG_LIBDIR := $(DEPROOT)/usr/lib/$(TRIPLET)/pkgconfig:$(DEPROOT)/usr/share/pkgconfig
export PKG_CONFIG_SYSROOT_DIR := $(DEPROOT)
CPPFLAGS    += -I$(DEPROOT)/usr/include -I$(DEPROOT)/usr/include/$(TRIPLET)
endif
ifneq ($(SYSROOT),)
GLIBC_ROOT  := $(SYSROOT)/glibc/root
LDFLAGS     += --sysroot=$(GLIBC_ROOT) -B$(GLIBC_ROOT)/usr/lib/$(TRIPLET)/ \
               -L$(GLIBC_ROOT)/usr/lib/$(TRIPLET) -L$(GLIBC_ROOT)/lib/$(TRIPLET) -L$(SYSROOT)/static \
               -Wl,--wrap=exp,--wrap=log,--wrap=log2,--wrap=pow
COMPAT_OBJ  := $(B)/obj/compat/glibc.o
$(SYSROOT)/.done: mk/sysroot.sh mk/debs.sh
	@echo "  SYSROOT $(SYSROOT)"
	$(Q)mk/sysroot.sh $(ARCH) $(SYSROOT)
endif
else
# The dynamic builds link the daemons with ld.lld where it is installed
# (mk/deps.sh installs Debian's lld): LLVM inside, in 2.6 s instead of
# 11.9 s with ld.bfd on 2 cores, and make check-mutants relinks one for
# most mutants. Only the daemons: lld writes no version node that names no
# symbol, and libptxcache.so keeps PTXCACHE_0 (debian/libptxcache0.symbols).
# The static and cross builds keep the toolchain's linker.
DAEMON_LD   := $(if $(shell command -v ld.lld 2>/dev/null),-fuse-ld=lld)
endif

PROTO_SRC  := proto/buf.c proto/frame.c proto/msg.c proto/ptxas_args.c proto/llc_args.c
DAEMON_SRC := daemon/main.c daemon/config.c daemon/log.c daemon/server.c daemon/compile.c \
              daemon/cubin_req.c daemon/manage.c daemon/flight.c daemon/worker.c daemon/worker_spawn.c daemon/worker_loop.c daemon/sandbox.c \
              daemon/confirm.c daemon/store.c daemon/store_put.c daemon/store_files.c daemon/store_admin.c daemon/store_ckpt.c daemon/store_hot.c daemon/store_blobs.c daemon/store_flat.c daemon/key.c daemon/codegen.c daemon/cubin.c \
              daemon/cubin_debug.c daemon/cubin_debug_elf.c daemon/l2_cluster.c daemon/l2.c daemon/l2_seal.c daemon/l2_conn.c daemon/l2_ev.c daemon/l2_conf.c daemon/l2_fleet.c daemon/store_batch.c daemon/syncer.c daemon/artifact.c daemon/conn.c daemon/reply.c daemon/idle.c daemon/tenant.c
DAEMON_CXX := daemon/llvm_shim.cpp
CLIENT_SRC := client/lib.c
CLI_SRC    := client/cli.c client/autostart.c client/front.c client/llc.c client/ptxas.c client/artifact.c

obj = $(patsubst %.c,$(B)/obj/%.o,$(1))

ifneq ($(COMPAT_OBJ),)
# Every object waits for the sysroot: a cross build compiles against it.
$(call obj,$(DAEMON_SRC) $(PROTO_SRC) $(CLIENT_SRC) $(CLI_SRC) compat/glibc.c) \
	$(B)/obj/daemon/llvm_shim.o: | $(SYSROOT)/.done
endif

ifeq ($(V),1)
Q :=
else
Q := @
endif

.PHONY: all deps run test check bench bench-against clean check-asan check-mutants fuzz corpus deb wheel sdist dist image
all: $(B)/ptxcached $(B)/ptxcache $(B)/libptxcache.a $(B)/libptxcache.so $(B)/unit

deps:
	@./mk/deps.sh

$(call obj,$(CLI_SRC)): DEP_CFLAGS += $(shell pkg-config --cflags json-c 2>/dev/null)
# The llc front runs LLVM 22's own llc for what the daemon does not model.
$(B)/obj/client/llc.o: DEP_CFLAGS += -DLLVM_BINDIR='"$(LLVM_BIN)"'

$(B)/obj/%.o: %.c
	@mkdir -p $(dir $@)
	@echo "  CC  $<"
	$(Q)$(CC) $(CPPFLAGS) $(CFLAGS) $(DEP_CFLAGS) -MMD -MP -c $< -o $@

$(B)/obj/daemon/codegen.o: daemon/codegen.c
	@mkdir -p $(dir $@)
	@echo "  CC  $<"
	$(Q)$(CC) $(CPPFLAGS) $(CFLAGS) $(LLVM_CFLAGS) -MMD -MP -c $< -o $@

$(B)/obj/daemon/llvm_shim.o: daemon/llvm_shim.cpp
	@mkdir -p $(dir $@)
	@echo "  CXX $<"
	$(Q)$(CXX) $(CPPFLAGS) -O2 -g -fPIC -Wall -Wextra -Wno-unused-parameter $(LLVM_CXXFLAGS) -MMD -MP -c $< -o $@

# schema.sql is embedded in the daemon as a C string.
$(B)/gen/schema.h: schema.sql
	@mkdir -p $(dir $@)
	$(Q){ echo 'static const char schema_sql[] ='; \
	     sed -e 's/\\/\\\\/g' -e 's/"/\\"/g' -e 's/^/"/' -e 's/$$/\\n"/' $<; \
	     echo ';'; } > $@
$(B)/obj/daemon/store.o: $(B)/gen/schema.h
$(B)/obj/daemon/store.o: CFLAGS += -I$(B)/gen

$(B)/ptxcached: $(call obj,$(DAEMON_SRC) $(PROTO_SRC)) $(B)/obj/daemon/llvm_shim.o $(COMPAT_OBJ)
	@echo "  LD  $@"
	$(Q)$(CXX) $(LDFLAGS) $(DAEMON_LD) -o $@ $^ $(DAEMON_LIBS)

# The test-only daemon (tests/test_sandbox.py): workers that run the attacks
# of daemon/probe.c on request. Never installed; build/ptxcached has none of
# it (a test checks).
all: $(B)/ptxcached-probe
$(B)/obj/probe/%.o: %.c
	@mkdir -p $(dir $@)
	@echo "  CC  $< (probes)"
	$(Q)$(CC) $(CFLAGS) -DPTXCACHE_PROBES $(DEP_CFLAGS) -MMD -MP -c $< -o $@
$(B)/ptxcached-probe: $(call obj,$(filter-out daemon/worker_loop.c,$(DAEMON_SRC)) $(PROTO_SRC)) \
		$(B)/obj/probe/daemon/worker_loop.o $(B)/obj/probe/daemon/probe.o \
		$(B)/obj/daemon/llvm_shim.o
	@echo "  LD  $@"
	$(Q)$(CXX) $(LDFLAGS) $(DAEMON_LD) -o $@ $^ $(DAEMON_LIBS)

$(B)/libptxcache.a: $(call obj,$(CLIENT_SRC) $(PROTO_SRC))
	@echo "  AR  $@"
	$(Q)rm -f $@ && ar rcs $@ $^

# The shared library: libptxcache.so.$(VERSION), soname libptxcache.so.$(SOVERSION)
# (raise SOVERSION with any change that breaks the ABI of client/ptxcache.h),
# and the two links a linker and a loader look for. It exports ptxcache_*
# alone (client/libptxcache.map): proto/ is the library's own business.
SOVERSION := 0
SONAME    := libptxcache.so.$(SOVERSION)
$(B)/libptxcache.so.$(VERSION): $(call obj,$(CLIENT_SRC) $(PROTO_SRC)) client/libptxcache.map
	@echo "  LD  $@"
	$(Q)$(CC) $(LDFLAGS) -shared -Wl,-soname,$(SONAME) \
		-Wl,--version-script,client/libptxcache.map -o $@ $(filter %.o,$^) -lmsgpackc
$(B)/$(SONAME): $(B)/libptxcache.so.$(VERSION)
	$(Q)ln -sf libptxcache.so.$(VERSION) $@
$(B)/libptxcache.so: $(B)/$(SONAME)
	$(Q)ln -sf $(SONAME) $@

# The CLI alone uses json-c, to print the daemon's JSON answers as tables.
$(B)/ptxcache: $(call obj,$(CLI_SRC)) $(B)/libptxcache.a $(COMPAT_OBJ)
	@echo "  LD  $@"
	$(Q)$(CC) $(LDFLAGS) -o $@ $^ $(CLI_LIBS)

UNIT_SRC := $(wildcard tests/unit/*.c)
$(B)/unit: $(call obj,$(UNIT_SRC) daemon/store.c daemon/store_put.c daemon/store_files.c daemon/store_admin.c daemon/store_ckpt.c daemon/syncer.c daemon/tenant.c daemon/store_hot.c daemon/store_blobs.c daemon/store_flat.c daemon/store_fault.c daemon/key.c daemon/log.c daemon/l2_cluster.c daemon/l2.c daemon/l2_seal.c daemon/l2_conn.c daemon/l2_ev.c daemon/l2_conf.c \
		daemon/cubin_debug.c daemon/cubin_debug_elf.c $(PROTO_SRC))
	@echo "  LD  $@"
	$(Q)$(CC) $(LDFLAGS) -o $@ $^ $(DEP_LIBS)
$(call obj,$(UNIT_SRC)): CFLAGS += -I$(B)/gen
$(call obj,$(UNIT_SRC)): $(B)/gen/schema.h

# l2drive: daemon/l2.c on its own against a live Redis, driven line by line
# by tests/test_l2_live.py.
all: $(B)/l2drive
$(B)/l2drive: $(call obj,tests/tools/l2drive.c daemon/l2_cluster.c daemon/l2.c daemon/l2_seal.c daemon/l2_conn.c daemon/l2_ev.c daemon/l2_conf.c daemon/log.c proto/buf.c)
	@echo "  LD  $@"
	$(Q)$(CC) $(LDFLAGS) -o $@ $^ $(DEP_LIBS)

# relocdrive: daemon/cubin_debug.c and cubin_debug_elf.c on their own against the real ptxas's
# cubins, driven by tests/test_reloc.py's oracle.
all: $(B)/relocdrive
$(B)/relocdrive: $(call obj,tests/tools/relocdrive.c daemon/cubin_debug.c daemon/cubin_debug_elf.c proto/buf.c)
	@echo "  LD  $@"
	$(Q)$(CC) $(LDFLAGS) -o $@ $^ -lm

# slowsync.so: a slow or failing fsync() for the daemon, by LD_PRELOAD
# (tests/test_large.py). Plain flags: no sanitizer runtime of its own.
all: $(B)/slowsync.so
$(B)/slowsync.so: tests/tools/slowsync.c
	@echo "  LD  $@"
	@mkdir -p $(dir $@)
	$(Q)$(CC) -O2 -fPIC -shared -o $@ $< -ldl

# Fuzz harnesses (tests/fuzz/). Every `make test` replays their seed
# corpora through replay_* (the normal compiler: no clang needed);
# `make fuzz` builds them with clang's libFuzzer, ASan and UBSan and runs
# each for FUZZ_SECONDS from the seeds, keeping new inputs in $(B)/fuzz/.
FUZZ_HARNESSES := frame request cubin_debug flat
FUZZ_SECONDS   ?= 60
FUZZ_CC        ?= clang
all: $(patsubst %,$(B)/fuzz/replay_%,$(FUZZ_HARNESSES))
.SECONDARY: $(patsubst %,$(B)/obj/tests/fuzz/fuzz_%.o,$(FUZZ_HARNESSES)) $(B)/obj/tests/fuzz/replay.o
$(B)/fuzz/replay_cubin_debug: $(call obj,daemon/cubin_debug.c daemon/cubin_debug_elf.c)
$(B)/fuzz/replay_flat: $(call obj,daemon/store_flat.c)
$(B)/fuzz/replay_%: $(B)/obj/tests/fuzz/fuzz_%.o $(B)/obj/tests/fuzz/replay.o $(call obj,$(PROTO_SRC))
	@mkdir -p $(dir $@)
	@echo "  LD  $@"
	$(Q)$(CC) $(LDFLAGS) -o $@ $^ $(DEP_LIBS)

fuzz: deps
	@./mk/deps.sh fuzz
	@mkdir -p $(B)/fuzz
	$(Q)for h in $(FUZZ_HARNESSES); do \
	  echo "  FUZZ $$h ($(FUZZ_SECONDS) s)"; \
	  $(FUZZ_CC) -g -O1 -std=gnu11 -I. -D_GNU_SOURCE $(DEP_CFLAGS) \
	    -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
	    -o $(B)/fuzz/libfuzzer_$$h tests/fuzz/fuzz_$$h.c $(PROTO_SRC) daemon/cubin_debug.c daemon/cubin_debug_elf.c daemon/store_flat.c \
	    $(DEP_LIBS) || exit 1; \
	  mkdir -p $(B)/fuzz/corpus_$$h; \
	  $(B)/fuzz/libfuzzer_$$h -max_total_time=$(FUZZ_SECONDS) -print_final_stats=1 \
	    -artifact_prefix=$(B)/fuzz/crash_$$h- $(B)/fuzz/corpus_$$h tests/fuzz/corpus/$$h \
	    > $(B)/fuzz/$$h.log 2>&1; rc=$$?; \
	  grep -E 'stat::number_of_executed_units|stat::peak_rss|SUMMARY|ERROR' $(B)/fuzz/$$h.log; \
	  [ $$rc = 0 ] || { echo "fuzz_$$h failed: see $(B)/fuzz/$$h.log"; exit 1; }; \
	done

# The sanitizer build: everything rebuilt with ASan and UBSan into
# $(ASAN_B)/, then the suite run against it (tests/harness.py takes its
# binaries from $$PTXCACHE_BUILD). LLVM is linked statically and is not
# instrumented; tests/lsan.supp names the leaks that are not ours.
# ASAN_TESTS narrows the run (tests/run.py arguments, e.g. "-k test_abuse").
ASAN_B ?= build-asan
check-asan: deps
	@$(MAKE) --no-print-directory B=$(ASAN_B) SANITIZE=address,undefined all corpus
	@PTXCACHE_BUILD=$(ASAN_B) PTXCACHE_SANITIZED=1 \
	  ASAN_OPTIONS=detect_leaks=1:abort_on_error=1:detect_stack_use_after_return=0 \
	  LSAN_OPTIONS=suppressions=$(CURDIR)/tests/lsan.supp:print_suppressions=0 \
	  UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
	  python3 tests/run.py $(ASAN_TESTS)

# Benchmarks (bench/): not tests, no timing asserts. QUICK=1 runs a subset.
# The chart needs matplotlib (`mk/deps.sh bench` installs it); without it
# the figures are still written and the chart is skipped.
PLOT_PYTHON ?= $(shell test -x /usr/bin/python3 && echo /usr/bin/python3 || echo python3)
$(B)/bench/bench: $(call obj,$(wildcard bench/*.c)) $(B)/libptxcache.a $(COMPAT_OBJ)
	@mkdir -p $(dir $@)
	@echo "  LD  $@"
	$(Q)$(CC) $(LDFLAGS) -o $@ $^ $(BENCH_LIBS)

bench: deps
	@$(MAKE) --no-print-directory all corpus $(B)/bench/bench
	@./mk/deps.sh bench || true
	$(B)/bench/bench --daemon $(B)/ptxcached --out $(B)/bench --corpus $(B)/corpus/triton \
	  $(if $(QUICK),--quick)
	@$(PLOT_PYTHON) bench/plot.py $(B)/bench/results.json $(B)/bench/latency.png
	@PTXCACHE_BUILD=$(B) python3 bench/tier.py --build $(B) --out $(B)/bench
	@PTXCACHE_BUILD=$(B) python3 bench/large.py --build $(B) --out $(B)/bench
	@PTXCACHE_BUILD=$(B) python3 bench/puts.py --build $(B) --count 2000
	@PTXCACHE_BUILD=$(B) python3 bench/fleet.py --build $(B) --out $(B)/bench
	@PTXCACHE_BUILD=$(B) python3 bench/jitdirs.py --build $(B) --out $(B)/bench
	@python3 bench/against.py --build $(B) $(if $(BASE),--base $(BASE)) $(if $(QUICK),,--full)

# This tree's daemon against an earlier commit's (bench/against.py): BASE
# built in $(B)/against/<sha>, a worktree of its own (reused), then
# bench --only start,miss,hit, bench --large and bench/large.py with each
# build in turn, ROUNDS rounds (at least 3), medians in
# $(B)/bench/against.json. FULL=1: the whole
# corpus rather than QUICK's 10 kernels. Without BASE: the newest bench-*
# tag, else the last commit that changed the README's benchmark figures.
ROUNDS ?= 3
bench-against: deps
	@$(MAKE) --no-print-directory $(B)/ptxcached corpus $(B)/bench/bench $(B)/l2drive
	@python3 bench/against.py --build $(B) $(if $(BASE),--base $(BASE)) --rounds $(ROUNDS) \
	  $(if $(FULL),--full)

# The kernels the tests and the bench compile (tests/corpus/README.md),
# unpacked from the repository's own archive into the build tree.
CORPUS_ARCHIVE := tests/corpus/triton.tar.zst
corpus: $(B)/corpus/triton/MANIFEST.tsv
$(B)/corpus/triton/MANIFEST.tsv: $(CORPUS_ARCHIVE)
	@echo "  UNPACK $<"
	$(Q)rm -rf $(B)/corpus/triton && mkdir -p $(B)/corpus
	$(Q)zstd -dcq $< | tar -x -C $(B)/corpus
	$(Q)touch $@

run: deps
	@$(MAKE) --no-print-directory all
	$(B)/ptxcached

test: deps
	@$(MAKE) --no-print-directory all corpus
	@PTXCACHE_BUILD=$(B) python3 tests/run.py $(TEST_ARGS)

check: test

# Each mechanism the tests claim, broken one at a time in a copy of the
# tree (tests/tools/mutants.py: the list, the line each changes, the tests
# that must notice): the named tests on the unchanged copy first, then per
# mutant a rebuild of what it changed and its named tests; fails if the
# baseline fails or a mutant survives. Not part of make test; .ci/run runs
# it. MUTANTS=name,... runs those alone. PASSED=FILE: the test-times.tsv
# of a suite run that passed on this build (CI's), the baseline of the
# tests it names.
check-mutants: deps
	@$(MAKE) --no-print-directory all corpus
	@python3 tests/tools/mutants.py --build $(B) $(if $(MUTANTS),--only $(MUTANTS)) \
	  $(if $(PASSED),--passed $(PASSED))

clean:
	rm -rf $(B)

# make install [PREFIX=/usr/local] [DESTDIR=]: binaries, library, header,
# ptxcache.pc, systemd units, the sysusers.d snippet, the sample config,
# the man pages, the Python package and the ptxas front's link. Units and
# ptxcache.pc get the install paths filled in. The daemon always reads
# /etc/ptxcache/ptxcached.conf, so SYSCONFDIR stays /etc whatever the
# PREFIX; an existing config file is never overwritten.
PREFIX       ?= /usr/local
BINDIR       ?= $(PREFIX)/bin
LIBDIR       ?= $(PREFIX)/lib
INCLUDEDIR   ?= $(PREFIX)/include
MANDIR       ?= $(PREFIX)/share/man
PKGCONFIGDIR ?= $(LIBDIR)/pkgconfig
SYSCONFDIR   ?= /etc
UNITDIR      ?= $(PREFIX)/lib/systemd/system
SYSUSERSDIR  ?= $(PREFIX)/lib/sysusers.d
# The Python package (python/ptxcache) and its start-up hook ptxcache.pth:
# where Debian's python3 looks (/usr/lib/python3/dist-packages for
# PREFIX=/usr, PREFIX/lib/python3.X/dist-packages elsewhere).
PYTHON       ?= python3
PYVER        := $(shell $(PYTHON) -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null)
PYTHONDIR    ?= $(if $(filter /usr,$(PREFIX)),$(PREFIX)/lib/python3/dist-packages,$(PREFIX)/lib/python$(PYVER)/dist-packages)
PY_SRC       := $(wildcard python/ptxcache/*.py)
# The ptxas front under the name Triton runs (TRITON_PTXAS_PATH): a link
# to the CLI, found by python/ptxcache/front.py.
FRONTDIR     ?= $(PREFIX)/lib/ptxcache
FRONT_TARGET := $(if $(filter $(PREFIX)/bin,$(BINDIR)),../../bin/ptxcache,$(BINDIR)/ptxcache)
INSTALL      ?= install
D            := $(DESTDIR)

.PHONY: install uninstall
install: all
	$(INSTALL) -d $(D)$(BINDIR) $(D)$(LIBDIR) $(D)$(INCLUDEDIR) $(D)$(PKGCONFIGDIR) \
		$(D)$(UNITDIR) $(D)$(SYSUSERSDIR) $(D)$(SYSCONFDIR)/ptxcache \
		$(D)$(MANDIR)/man1 $(D)$(MANDIR)/man5 $(D)$(MANDIR)/man8
	$(INSTALL) -m 755 $(B)/ptxcached $(B)/ptxcache $(D)$(BINDIR)/
	$(INSTALL) -m 644 $(B)/libptxcache.a $(D)$(LIBDIR)/
	$(INSTALL) -m 644 $(B)/libptxcache.so.$(VERSION) $(D)$(LIBDIR)/
	ln -sf libptxcache.so.$(VERSION) $(D)$(LIBDIR)/$(SONAME)
	ln -sf $(SONAME) $(D)$(LIBDIR)/libptxcache.so
	$(INSTALL) -m 644 client/ptxcache.h $(D)$(INCLUDEDIR)/
	sed -e 's|@PREFIX@|$(PREFIX)|' -e 's|@LIBDIR@|$(LIBDIR)|' -e 's|@INCLUDEDIR@|$(INCLUDEDIR)|' \
	    -e 's|@VERSION@|$(VERSION)|' client/ptxcache.pc.in > $(D)$(PKGCONFIGDIR)/ptxcache.pc
	sed -e 's|@BINDIR@|$(BINDIR)|g' systemd/ptxcached.service.in > $(D)$(UNITDIR)/ptxcached.service
	chmod 644 $(D)$(PKGCONFIGDIR)/ptxcache.pc $(D)$(UNITDIR)/ptxcached.service
	$(INSTALL) -m 644 systemd/ptxcached.socket $(D)$(UNITDIR)/
	$(INSTALL) -m 644 systemd/ptxcache.sysusers $(D)$(SYSUSERSDIR)/ptxcache.conf
	test -e $(D)$(SYSCONFDIR)/ptxcache/ptxcached.conf || \
		$(INSTALL) -m 644 systemd/ptxcached.conf $(D)$(SYSCONFDIR)/ptxcache/ptxcached.conf
	$(INSTALL) -m 644 man/ptxcache.1 $(D)$(MANDIR)/man1/
	$(INSTALL) -m 644 man/ptxcached.conf.5 $(D)$(MANDIR)/man5/
	$(INSTALL) -m 644 man/ptxcached.8 $(D)$(MANDIR)/man8/
	$(INSTALL) -d $(D)$(PYTHONDIR)/ptxcache $(D)$(FRONTDIR)
	$(INSTALL) -m 644 $(PY_SRC) $(D)$(PYTHONDIR)/ptxcache/
	$(INSTALL) -m 644 python/ptxcache.pth $(D)$(PYTHONDIR)/
	ln -sf $(FRONT_TARGET) $(D)$(FRONTDIR)/ptxas

# Leaves the config file, the cache and the ptxcache user alone.
uninstall:
	rm -f $(D)$(BINDIR)/ptxcached $(D)$(BINDIR)/ptxcache $(D)$(LIBDIR)/libptxcache.a \
	      $(D)$(LIBDIR)/libptxcache.so $(D)$(LIBDIR)/$(SONAME) \
	      $(D)$(LIBDIR)/libptxcache.so.$(VERSION) $(D)$(INCLUDEDIR)/ptxcache.h \
	      $(D)$(PKGCONFIGDIR)/ptxcache.pc $(D)$(UNITDIR)/ptxcached.service \
	      $(D)$(UNITDIR)/ptxcached.socket $(D)$(SYSUSERSDIR)/ptxcache.conf \
	      $(D)$(MANDIR)/man1/ptxcache.1 $(D)$(MANDIR)/man5/ptxcached.conf.5 \
	      $(D)$(MANDIR)/man8/ptxcached.8 $(D)$(PYTHONDIR)/ptxcache.pth $(D)$(FRONTDIR)/ptxas
	rm -rf $(D)$(PYTHONDIR)/ptxcache
	-rmdir $(D)$(FRONTDIR) 2>/dev/null

# make deb: the Debian packages ptxcache, libptxcache0 and libptxcache-dev
# (debian/), built by dpkg-buildpackage from a copy of the tree in
# $(DEB_DIR)/ptxcache-$(VERSION) (dpkg-buildpackage writes its results beside
# the tree it builds, so they land in $(DEB_DIR), inside the build tree),
# then checked by lintian, which must report no error and no warning that
# debian/*.lintian-overrides does not explain. The package build runs the
# test suite unless DEB_BUILD_OPTIONS=nocheck.
DEB_DIR  ?= $(B)/deb
DEB_TREE := $(DEB_DIR)/ptxcache-$(VERSION)
deb:
	@./mk/deps.sh
	$(Q)rm -rf $(DEB_DIR) && mkdir -p $(DEB_TREE)
	@echo "  COPY $(DEB_TREE)"
	$(Q)if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then \
	  git ls-files -z -co --exclude-standard | tar --null --ignore-failed-read -T - -cf -; \
	else \
	  tar --exclude='./build*' --exclude=./.git -cf - .; \
	fi | tar -xf - -C $(DEB_TREE)
	@# The copy is no git checkout: its list of files, for the tests that
	@# need one (tests/test_licence.py), as an sdist carries it.
	$(Q)(cd $(DEB_TREE) && find . -type f ! -name MANIFEST | sed 's|^\./||' | LC_ALL=C sort) \
	  > $(DEB_TREE)/MANIFEST
	$(Q)cd $(DEB_TREE) && dpkg-buildpackage -b -us -uc -Jauto
	@echo "  LINTIAN $(DEB_DIR)/*.changes"
	$(Q)lintian --fail-on error,warning $(DEB_DIR)/ptxcache_$(VERSION)_*.changes
	@ls -l $(DEB_DIR)/*.deb

# make wheel: the Python wheel (pyproject.toml), in $(WHEEL_DIR): the
# package, ptxcache.pth, and ptxcached and ptxcache built with STATIC=1 in
# build-static/ as its programs, tagged manylinux_2_Y by the highest glibc
# symbol version they need. The tree's own PEP 517 backend
# (mk/wheel_backend.py) is called directly: `pip wheel --no-build-isolation
# --no-index .` and `python3 -m build --no-isolation` run the same hooks.
# make sdist: the source archive it builds from.
WHEEL_DIR ?= $(B)/wheel
wheel sdist:
	@./mk/deps.sh
	$(Q)mkdir -p $(WHEEL_DIR)
	$(Q)PTXCACHE_WHEEL_ARCH=$(ARCH) $(PYTHON) -c 'import os, sys; sys.path.insert(0, "mk"); \
	  import wheel_backend as w; \
	  print(os.path.join(sys.argv[2], getattr(w, "build_" + sys.argv[1])(sys.argv[2])))' $@ $(WHEEL_DIR)

# Everything linked against the sysroot carries compat/glibc.c (STATIC=1).
$(B)/ptxcached-probe $(B)/unit $(B)/l2drive $(B)/relocdrive \
	$(patsubst %,$(B)/fuzz/replay_%,$(FUZZ_HARNESSES)): $(COMPAT_OBJ)

# make dist [ARCH=x86_64|aarch64]: the node tarball for any distribution,
# $(DIST_DIR)/ptxcache-VERSION-linux-ARCH.tar.xz: ptxcached and ptxcache
# built with STATIC=1 in $(STATIC_B)/ as for the wheel (every library but
# glibc linked in; build-static/, or build-static-aarch64/ for the cross
# build) and stripped, the systemd units (the service's ExecStart= filled
# in by install.sh for its PREFIX), the sysusers.d snippet, the sample
# configuration, the man pages and install.sh (mk/dist/install.sh: PREFIX,
# DESTDIR, the ptxcache user when run as root). DIST_BUILD=0 takes the
# programs in $(STATIC_B)/ as they are (built elsewhere), after checking
# their ELF machine. The archive is reproducible: names sorted, owner 0,
# every mtime SOURCE_DATE_EPOCH (default: the last commit's time), xz in
# threaded mode (its output is the same for any number of threads;
# DIST_XZ sets its options). tests/test_dist.py installs and runs it.
ARCH      ?= $(shell uname -m)
STATIC_B  ?= $(if $(filter $(ARCH),$(shell uname -m)),build-static,build-static-$(ARCH))
DIST_DIR  ?= $(B)/dist
DIST_NAME := ptxcache-$(VERSION)-linux-$(ARCH)
DIST_BUILD ?= 1
DIST_ELF_x86_64  := X86-64
DIST_ELF_aarch64 := AArch64
STRIP     ?= $(if $(filter $(ARCH),$(shell uname -m)),strip,$(ARCH)-linux-gnu-strip)
DIST_XZ   ?= -T2 -6
SOURCE_DATE_EPOCH ?= $(shell git log -1 --format=%ct 2>/dev/null || echo 0)
dist:
	$(Q)test -n "$(DIST_ELF_$(ARCH))" || { echo "make dist: ARCH is x86_64 or aarch64, not '$(ARCH)'" >&2; exit 2; }
	$(Q)if [ "$(DIST_BUILD)" = 1 ]; then ./mk/deps.sh && $(MAKE) --no-print-directory STATIC=1 \
	  ARCH=$(ARCH) B=$(STATIC_B) $(STATIC_B)/ptxcached $(STATIC_B)/ptxcache; \
	else for p in ptxcached ptxcache; do test -x $(STATIC_B)/$$p || { \
	  echo "make dist: no $(STATIC_B)/$$p: build the $(ARCH) programs there first (STATIC=1 B=$(STATIC_B))" >&2; exit 1; }; done; fi
	$(Q)rm -rf $(DIST_DIR)/$(DIST_NAME) && mkdir -p $(DIST_DIR)/$(DIST_NAME)/bin \
	  $(DIST_DIR)/$(DIST_NAME)/systemd $(DIST_DIR)/$(DIST_NAME)/man
	$(Q)for p in ptxcached ptxcache; do \
	  readelf -h $(STATIC_B)/$$p | grep -q 'Machine: *.*$(DIST_ELF_$(ARCH))' || { \
	    echo "make dist: $(STATIC_B)/$$p is not an $(ARCH) program" >&2; exit 1; }; \
	  $(STRIP) -o $(DIST_DIR)/$(DIST_NAME)/bin/$$p $(STATIC_B)/$$p || exit 1; done
	$(Q)cp systemd/ptxcached.service.in systemd/ptxcached.socket systemd/ptxcache.sysusers \
	  systemd/ptxcached.conf $(DIST_DIR)/$(DIST_NAME)/systemd/
	$(Q)cp man/ptxcache.1 man/ptxcached.conf.5 man/ptxcached.8 $(DIST_DIR)/$(DIST_NAME)/man/
	$(Q)cp mk/dist/install.sh LICENSE $(DIST_DIR)/$(DIST_NAME)/
	$(Q)chmod -R u=rwX,go=rX $(DIST_DIR)/$(DIST_NAME) && \
	  chmod 755 $(DIST_DIR)/$(DIST_NAME)/install.sh $(DIST_DIR)/$(DIST_NAME)/bin/*
	@echo "  TAR $(DIST_DIR)/$(DIST_NAME).tar.xz"
	$(Q)tar -C $(DIST_DIR) --sort=name --mtime=@$(SOURCE_DATE_EPOCH) --owner=0 --group=0 \
	  --numeric-owner --format=gnu -cf - $(DIST_NAME) | xz $(DIST_XZ) -c > $(DIST_DIR)/$(DIST_NAME).tar.xz.tmp
	$(Q)mv $(DIST_DIR)/$(DIST_NAME).tar.xz.tmp $(DIST_DIR)/$(DIST_NAME).tar.xz
	$(Q)rm -rf $(DIST_DIR)/$(DIST_NAME)
	@ls -l $(DIST_DIR)/$(DIST_NAME).tar.xz

# make image: the OCI image of the daemon, FROM scratch (no base image
# fetched), by mk/image.py with Debian's umoci: ptxcached and ptxcache
# (the STATIC=1 build in $(STATIC_B)/, stripped), the glibc loader and
# libraries they NEED from this machine's /lib/<multiarch> (libc, libm,
# libpthread, libdl and ld.so: nothing else), /etc/passwd and /etc/group with the non-root user
# ptxcache ($(IMAGE_UID)), /tmp. It runs as $(IMAGE_UID):$(IMAGE_UID), entrypoint
# `ptxcached --socket /run/ptxcache/ptxcached.sock --cache-dir
# /var/cache/ptxcache`, both directories volumes. Output: the OCI layout
# $(IMAGE_DIR)/oci (reference $(IMAGE_NAME):$(VERSION)) and the same as an oci-archive,
# $(IMAGE_DIR)/$(IMAGE_NAME)-$(VERSION).oci.tar (`podman load -i`, `skopeo
# copy oci-archive:FILE docker://REGISTRY/$(IMAGE_NAME):$(VERSION)`). Size on
# Debian 12, x86_64: 52 MB unpacked, 23 MB compressed (the daemon carries
# LLVM's NVPTX back end: 49 MB of it). tests/test_image.py runs it.
IMAGE_DIR  ?= $(B)/image
IMAGE_NAME ?= ptxcache
IMAGE_UID  ?= 65532
image:
	$(Q)test "$(ARCH)" = "$$(uname -m)" || { echo "make image: this machine's architecture only" >&2; exit 2; }
	@./mk/deps.sh
	@$(MAKE) --no-print-directory STATIC=1 B=$(STATIC_B) $(STATIC_B)/ptxcached $(STATIC_B)/ptxcache
	$(Q)SOURCE_DATE_EPOCH=$(SOURCE_DATE_EPOCH) $(PYTHON) mk/image.py --programs $(STATIC_B) \
	  --out $(IMAGE_DIR) --name $(IMAGE_NAME) --tag $(VERSION) --uid $(IMAGE_UID)

-include $(shell find $(B)/obj -name '*.d' 2>/dev/null)
