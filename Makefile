# wcache: build, run, test, bench, install.
#
#   make                 everything (CUDA parts only where a toolkit is found)
#   make run             generate a small model, serve it, attach, stop
#   make test [T=glob]   the test programs (T filters by name), then the summary
#   make bench           the benchmark suite (bench/run)
#   make fuzz            libFuzzer targets under ASan/UBSan (FUZZ_SECONDS each)
#   make install PREFIX=/usr/local DESTDIR=
#   make clean
#
# Knobs: V=1 (echo commands), SANITIZE=address,undefined, CUDA=0|1,
# CUDA_HOME=/usr/local/cuda, WERROR=0.

PREFIX    ?= /usr/local
DESTDIR   ?=
CUDA_HOME ?= /usr/local/cuda
WERROR    ?= 1
SANITIZE  ?=
T         ?=
FUZZ_SECONDS ?= 60
CC        ?= cc

ifeq ($(origin CUDA),undefined)
CUDA := $(if $(wildcard $(CUDA_HOME)/include/cuda.h),1,0)
endif

comma := ,
BUILD := build$(if $(SANITIZE),-$(subst $(comma),-,$(SANITIZE)))

ifeq ($(V),1)
Q :=
say = @true
else
Q := @
say = @printf '  %-7s %s\n' $(1) $(2)
endif

# CFLAGS, CPPFLAGS and LDFLAGS are the user's (`make CFLAGS=-O0`); the flags
# the code needs are in WC_* and always come first, so an override on the
# command line adds to them instead of dropping them.
CFLAGS   ?= -O2 -g
WC_CFLAGS := -std=gnu11 -fPIC -pthread -Wall -Wextra -Wshadow -Wno-unused-parameter \
	     -Wstrict-prototypes -Wmissing-prototypes -fno-strict-aliasing
# proto/'s modules, in the order they may include each other (proto/README.md):
# their headers are included by name ("wire.h"), one -I each
PROTO_MODS  := base wire model plan
PROTO_INC   := $(PROTO_MODS:%=-Iproto/%)
WC_CPPFLAGS := -D_GNU_SOURCE -I. -Ireactor $(PROTO_INC) -Igpu -Itools/libwcache -Itools/common
WC_LDFLAGS :=
ifeq ($(WERROR),1)
WC_CFLAGS += -Werror
endif
ifneq ($(SANITIZE),)
WC_CFLAGS  += -fsanitize=$(SANITIZE) -fno-omit-frame-pointer -fno-sanitize-recover=all
WC_LDFLAGS += -fsanitize=$(SANITIZE)
endif
ALL_CFLAGS  = $(WC_CPPFLAGS) $(CPPFLAGS) $(WC_CFLAGS) $(CFLAGS)
ALL_LDFLAGS = $(WC_LDFLAGS) $(LDFLAGS)

# liburing, jansson and xxHash are linked statically so that a binary built
# here runs on a machine that lacks those packages (the GPU machine).
STATIC_LIBS := -Wl,-Bstatic -luring -ljansson -lxxhash -Wl,-Bdynamic
SYS_LIBS    := -lpthread -ldl -lrt -lm
# Debian's libjansson.a is not position-independent: the shared client
# library links jansson dynamically. It has no reactor and no io_uring
# (client_so.sh checks its NEEDED list and symbols).
SO_LIBS     := -Wl,-Bstatic -lxxhash -Wl,-Bdynamic -ljansson

GPU_SRC := $(filter-out gpu/cuda%.c gpu/nocuda.c,$(wildcard gpu/*.c))
GPU_CU  :=
ifeq ($(CUDA),1)
GPU_SRC  += $(wildcard gpu/cuda*.c)
GPU_CU   := $(wildcard gpu/*.cu)
CUDA_CPPFLAGS := -I$(CUDA_HOME)/include
CUDA_LIBS := -L$(CUDA_HOME)/lib64 -lcudart_static
else
GPU_SRC  += $(wildcard gpu/nocuda.c)
CUDA_LIBS :=
endif
# Kernels: Hopper (the H200) and Ampere code, plus PTX that any GPU from
# Turing on can compile at load time (without a kernel wcd hashes on CPUs).
NVCC       ?= $(CUDA_HOME)/bin/nvcc
NVCC_ARCH  ?= -gencode arch=compute_80,code=sm_80 -gencode arch=compute_90,code=sm_90 \
	      -gencode arch=compute_75,code=compute_75
# No C++ runtime is linked: no exceptions, no thread-safe static guards.
NVCC_FLAGS ?= -O3
WC_NVCC_FLAGS := -std=c++17 -Xcompiler -fPIC,-Wall,-fno-exceptions,-fno-threadsafe-statics

REACTOR_SRC := $(wildcard reactor/*.c)
PROTO_SRC   := $(wildcard $(PROTO_MODS:%=proto/%/*.c))
CLIENT_SRC  := $(wildcard tools/libwcache/*.c)
TOOLS       := $(filter-out libwcache common dist,$(notdir $(patsubst %/,%,$(wildcard tools/*/))))
COMMON_SRC  := $(wildcard tools/common/*.c)
# the tests live in test/ROOM/ (test/lib/lib: their helpers, test/fuzz: the
# fuzz targets, test/py: the Python tests); T filters by file name
TEST_ROOMS  := $(filter-out test/lib/ test/fuzz/ test/py/ test/data/,$(sort $(dir $(wildcard test/*/))))
TEST_SRC    := $(wildcard $(addsuffix $(T)*.c,$(TEST_ROOMS)))
TEST_SH     := $(wildcard $(addsuffix $(T)*.sh,$(TEST_ROOMS)))
TEST_PY     := $(wildcard test/py/test_$(T)*.py)
# the helpers the test programs share (test/lib/*.h), compiled once
TESTLIB_SRC := $(wildcard test/lib/*.c)
# bench/cuda/'s probes are built by hand (each has its line)
BENCH_SRC   := $(filter-out bench/cuda/%,$(wildcard bench/*/*.c))

obj = $(patsubst %.c,$(BUILD)/obj/%.o,$(1))

LIB_REACTOR := $(BUILD)/lib/libwcreactor.a
LIB_PROTO   := $(BUILD)/lib/libwcproto.a
LIB_GPU     := $(BUILD)/lib/libwcgpu.a
LIB_CLIENT  := $(BUILD)/lib/libwcache.a
SO_CLIENT   := $(BUILD)/lib/libwcache.so
LIBS        := $(LIB_CLIENT) $(LIB_GPU) $(LIB_PROTO) $(LIB_REACTOR)
LINK_LIBS   := $(LIBS) $(STATIC_LIBS) $(CUDA_LIBS) $(SYS_LIBS)
LIB_TEST    := $(BUILD)/lib/libwctest.a
# the shell tests' helper programs (test/lib/bin/*.c)
TEST_TOOLS  := $(patsubst test/%.c,$(BUILD)/test/%,$(wildcard test/lib/bin/*.c))

BINS  := $(addprefix $(BUILD)/bin/,$(TOOLS))
# man pages, made from each tool's --help (see install)
MAN8     := wcd wcctl
MAN1     := wcattach wcgen wcbench
MANS     := $(MAN8:%=$(BUILD)/man/%.8) $(MAN1:%=$(BUILD)/man/%.1)
# one folder of test programs: test/ROOM/NAME.c makes $(BUILD)/test/NAME
TESTS := $(addprefix $(BUILD)/test/,$(basename $(notdir $(TEST_SRC))))
BENCHES := $(addprefix $(BUILD)/bench/,$(basename $(notdir $(BENCH_SRC))))

.PHONY: all run test bench fuzz install python-install uninstall man clean deps deps-bench deps-fuzz deps-python check-deps
.SECONDARY:
# A recipe that fails leaves no output behind to look up to date.
.DELETE_ON_ERROR:
.DEFAULT_GOAL := all

all: $(LIBS) $(SO_CLIENT) $(SO_CLIENT).0 $(BINS) $(LIB_TEST) $(TEST_TOOLS) $(TESTS) $(BENCHES)

# --- compile -------------------------------------------------------------

$(BUILD)/obj/gpu/cuda%.o: WC_CPPFLAGS += $(CUDA_CPPFLAGS)
# compile gpu/cuda_hash_host.c (its one CUDA wait replaced) and the client
# side (its runtime calls and driver table faked) in: no GPU
$(BUILD)/obj/test/gpu/hc_pool.o $(BUILD)/obj/test/gpu/cuda_cur.o: WC_CPPFLAGS += $(CUDA_CPPFLAGS) -DWC_CUDA=$(CUDA)
# wcd's files name each other's headers by folder ("serve/server.h"); so
# does the test that compiles its state machine in.
$(BUILD)/obj/tools/wcd/%.o $(BUILD)/obj/test/wcd/wcd_state.o: WC_CPPFLAGS += -Itools/wcd
$(BUILD)/obj/%.o: %.c | check-deps
	$(call say,CC,$<)
	@mkdir -p $(@D)
	$(Q)$(CC) $(ALL_CFLAGS) -MMD -MP -c -o $@ $<

$(BUILD)/obj/%.cu.o: %.cu | check-deps
	$(call say,NVCC,$<)
	@mkdir -p $(@D)
	$(Q)$(NVCC) $(WC_CPPFLAGS) $(CPPFLAGS) $(WC_NVCC_FLAGS) $(NVCC_FLAGS) $(NVCC_ARCH) -MMD -MP -c -o $@ $<

-include $(shell find $(BUILD)/obj -name '*.d' 2>/dev/null)

# Every output the tests use has this line: `make -n` prints it for each one
# that is out of date (how `make test` finds what a failed build left stale).
built = @: wc-built $@

define archive
	$(call say,AR,$@)
	$(built)
	@mkdir -p $(@D)
	$(Q)rm -f $@ && ar rcs $@ $^
endef

$(LIB_REACTOR): $(call obj,$(REACTOR_SRC)) ; $(archive)
$(LIB_PROTO):   $(call obj,$(PROTO_SRC))   ; $(archive)
$(LIB_GPU):     $(call obj,$(GPU_SRC)) $(patsubst %.cu,$(BUILD)/obj/%.cu.o,$(GPU_CU)) ; $(archive)
$(LIB_CLIENT):  $(call obj,$(CLIENT_SRC))  ; $(archive)
$(LIB_TEST):    $(call obj,$(TESTLIB_SRC)) ; $(archive)
$(BUILD)/obj/test/%.o: WC_CPPFLAGS += -Itest/lib

# The shared client library carries everything it needs but libc and
# jansson; --no-undefined: nothing is left for the engine to supply.
$(SO_CLIENT): $(call obj,$(CLIENT_SRC)) $(LIB_GPU) $(LIB_PROTO) \
		tools/libwcache/libwcache.map
	$(call say,LD,$@)
	$(built)
	$(Q)$(CC) -shared -o $@ -Wl,-soname,libwcache.so.0 $(ALL_LDFLAGS) \
		-Wl,--no-undefined \
		-Wl,--version-script=tools/libwcache/libwcache.map \
		$(call obj,$(CLIENT_SRC)) $(LIB_GPU) $(LIB_PROTO) \
		$(SO_LIBS) $(CUDA_LIBS) $(SYS_LIBS)

# The soname's link, so that a program linked with -lwcache runs from here.
$(SO_CLIENT).0: $(SO_CLIENT)
	$(Q)ln -sf libwcache.so $@

.SECONDEXPANSION:
$(BUILD)/bin/%: $$(call obj,$$(wildcard tools/$$*/*.c tools/$$*/*/*.c) $(COMMON_SRC)) $(LIBS)
	$(call say,LD,$@)
	$(built)
	@mkdir -p $(@D)
	$(Q)$(CC) $(ALL_LDFLAGS) -o $@ $(filter %.o,$^) $(LINK_LIBS)

# a test's source is test/ROOM/NAME.c (all of them, whatever T is); a
# helper program's test/lib/bin/NAME.c
test_src = $(or $(filter %/$(1).c,$(ALL_TEST_SRC)),test/$(1).c)
ALL_TEST_SRC := $(wildcard $(addsuffix *.c,$(TEST_ROOMS)))
$(BUILD)/test/%: $$(call obj,$$(call test_src,$$*)) $(call obj,$(COMMON_SRC)) $(LIB_TEST) $(LIBS)
	$(call say,LD,$@)
	$(built)
	@mkdir -p $(@D)
	$(Q)$(CC) $(ALL_LDFLAGS) -o $@ $(filter %.o,$^) $(LIB_TEST) $(LINK_LIBS)

# bench/KIND/NAME.c makes $(BUILD)/bench/NAME (one folder of programs)
bench_src = $(foreach f,$(BENCH_SRC),$(if $(filter $(1).c,$(notdir $(f))),$(f)))
$(BUILD)/bench/%: $$(call obj,$$(call bench_src,$$*)) $(call obj,$(COMMON_SRC)) $(LIBS)
	$(call say,LD,$@)
	$(built)
	@mkdir -p $(@D)
	$(Q)$(CC) $(ALL_LDFLAGS) -o $@ $(filter %.o,$^) $(LINK_LIBS)

# --- the two set-up commands --------------------------------------------

# Before anything is compiled: the headers of the build packages, found as
# the compiler finds them, else one message naming the Debian packages
# missing and `make deps` (a fresh machine's plain `make`).
DEP_HEADERS := liburing.h=liburing-dev xxhash.h=libxxhash-dev jansson.h=libjansson-dev dlpack/dlpack.h=libdlpack-dev
check-deps:
	@command -v $(firstword $(CC)) >/dev/null 2>&1 || { \
		echo "make: the C compiler '$(CC)' is not found: run 'make deps' as root (it installs gcc and the libraries' packages) or apt-get install gcc" >&2; exit 1; }
	@missing=; for hp in $(DEP_HEADERS); do \
		echo "#include <$${hp%%=*}>" | $(CC) $(WC_CPPFLAGS) $(CPPFLAGS) -E -x c - >/dev/null 2>&1 || \
			missing="$$missing $${hp#*=}"; \
	done; \
	if [ -n "$$missing" ]; then \
		echo "make: missing build packages:$$missing ($(CC) finds no header of theirs); run 'make deps' as root (it installs them and the test tools), or apt-get install$$missing" >&2; \
		exit 1; \
	fi

DEB_BUILD := gcc make pkg-config liburing-dev libxxhash-dev libjansson-dev libdlpack-dev
DEB_TEST  := xxhash python3 python3-numpy python3-xxhash python3-torch python3-pytest python3-setuptools python3-pip util-linux procps bsdutils curl prometheus
DEB_BENCH := redis-server redis-tools
# tools/dist's checks: systemd-analyze, yamllint, groff, strace; and kubectl, which
# another package may provide (Google's kubectl conflicts with Debian's
# kubernetes-client): a command listed as CMD=PACKAGE counts when on PATH.
DEB_TEST  += systemd yamllint groff-base strace
DEB_CMDS  := kubectl=kubernetes-client

# Installs the Debian packages that are missing (we are root on the build
# machines); prints what to run when we are not.
deps:
	@missing=$$(for p in $(DEB_BUILD) $(DEB_TEST) $(EXTRA_DEBS); do \
		dpkg-query -W -f='$${Status}\n' $$p 2>/dev/null | grep -q '^install ok installed' || echo $$p; done; \
		for c in $(DEB_CMDS); do command -v $${c%%=*} >/dev/null || echo $${c#*=}; done); \
	if [ -n "$$missing" ]; then \
		if [ "$$(id -u)" != 0 ]; then echo "missing packages: $$missing (run: sudo apt-get install $$missing)"; exit 1; fi; \
		echo "installing: $$missing"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null || exit 1; \
	fi

deps-bench:
	@$(MAKE) --no-print-directory deps EXTRA_DEBS="$(DEB_BENCH)"

# python-install needs pip in $(PYTHON), nothing else (the package builds
# with its own backend): a Python of its own (a venv, a GPU machine's) that
# has it needs no apt.
deps-python:
	@$(PYTHON) -c "import pip" 2>/dev/null || \
		$(MAKE) --no-print-directory deps DEB_BUILD= DEB_TEST="python3 python3-pip" DEB_CMDS=

run: deps
	@$(MAKE) --no-print-directory all
	@BUILD=$(BUILD) tools/run-demo.sh

# With T set (a developer's filtered run) the build keeps going past other
# parts' failures; a plain `make test` fails on any build error. After a
# failed build every output that is still out of date is deleted and named
# to run.sh, which reports it failed: an old binary never runs and passes.
# TEST_JOBS tests run at once (most wait on daemons, not on the CPU).
TEST_JOBS ?= $(shell n=$$(nproc); echo $$((n < 4 ? 4 : n)))
# each test's bound (test/run.sh): a sanitizer build runs two to four
# times slower (test_py_modcache.py took 116.5 s of the 120 in one CI run
# on 2 cores, over them in the next)
TEST_TIMEOUT ?= $(if $(SANITIZE),300,120)
BUILT     := $(LIBS) $(SO_CLIENT) $(SO_CLIENT).0 $(BINS) $(MANS) $(LIB_TEST) $(TEST_TOOLS) $(TESTS) $(BENCHES)
PYTHON    ?= /usr/bin/python3
# Python is not built with ASan: pytest loads an ASan libwcache.so only with
# the runtime preloaded (and without leak checks of the interpreter).
ifneq ($(filter address,$(subst $(comma), ,$(SANITIZE))),)
PYTEST_PRELOAD = $(shell $(CC) -print-file-name=libasan.so)
endif
test: deps
	@stale=; $(MAKE) --no-print-directory $(if $(V),,-s) $(if $(T),-k) $(BUILT) || { \
		$(if $(T),,exit 1;) \
		for f in $$($(MAKE) --no-print-directory -n -k $(BUILT) 2>/dev/null | sed -n 's/^: wc-built //p'); do \
			rm -f $$f; case " $(LIBS) $(LIB_TEST) $(TESTS) " in *" $$f "*) ;; *) stale="$$stale --not-built $$f" ;; esac; \
		done; }; \
	BUILD=$(BUILD) WC_TOP=$(CURDIR) PYTHON=$(PYTHON) WC_PYTEST_PRELOAD=$(PYTEST_PRELOAD) \
	TEST_TIMEOUT=$(TEST_TIMEOUT) \
	PYTHONPATH=$(CURDIR)/tools/libwcache/python WCACHE_LIB=$(CURDIR)/$(SO_CLIENT) \
	test/run.sh -j $(TEST_JOBS) $$stale $(TESTS) $(TEST_SH) $(TEST_PY)

bench: deps-bench
	@$(MAKE) --no-print-directory all
	@BUILD=$(BUILD) bench/run

# --- fuzzing (clang's libFuzzer) ----------------------------------------

FUZZ_SRC := $(wildcard test/fuzz/*.c)
FUZZERS  := $(patsubst test/fuzz/%.c,build-fuzz/%,$(FUZZ_SRC))
FUZZ_FLAGS := -O1 -g -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all

build-fuzz/%: test/fuzz/%.c $(PROTO_SRC)
	$(call say,FUZZ,$@)
	@mkdir -p $(@D)
	$(Q)clang $(WC_CPPFLAGS) -DWC_LAYOUT_SRC_DIR='"$(CURDIR)/proto/plan/layouts"' $(CPPFLAGS) -std=gnu11 $(FUZZ_FLAGS) -o $@ $< $(PROTO_SRC) -ljansson -lxxhash -lm

# Each target first runs every input of test/fuzz/regress/<target>/ once
# (each a crash once found: copy a crash-* artifact there when you fix it),
# then fuzzes FUZZ_SECONDS from the kept corpus. CI (.ci/run) runs it with
# FUZZ_SECONDS=10.
DEB_FUZZ := clang
deps-fuzz:
	@$(MAKE) --no-print-directory deps EXTRA_DEBS="$(DEB_FUZZ)"

fuzz: deps-fuzz
	@$(MAKE) --no-print-directory $(FUZZERS)
	@for f in $(FUZZERS); do n=$${f##*/}; mkdir -p build-fuzz/corpus-$$n; \
		if [ -d test/fuzz/regress/$$n ] && ls test/fuzz/regress/$$n/* >/dev/null 2>&1; then \
			echo "regression inputs of $$n: $$(ls test/fuzz/regress/$$n | wc -l)"; \
			$$f test/fuzz/regress/$$n/* 2>build-fuzz/$$n.regress.log || \
				{ tail -40 build-fuzz/$$n.regress.log; exit 1; }; fi; \
		echo "fuzzing $$n for $(FUZZ_SECONDS) s"; \
		$$f -max_total_time=$(FUZZ_SECONDS) -print_final_stats=1 -artifact_prefix=build-fuzz/$$n- build-fuzz/corpus-$$n test/fuzz/corpus/$$n \
			2>build-fuzz/$$n.log || { tail -40 build-fuzz/$$n.log; exit 1; }; \
		grep -E 'stat::number_of_executed_units' build-fuzz/$$n.log; done

# --- install ---------------------------------------------------------------
#
# make install [PREFIX=/usr/local] [DESTDIR=] installs the tools, the client
# libraries and headers, a pkg-config file (pkg-config --cflags --libs
# wcache), the man pages (made from each tool's --help by
# tools/dist/man/mkman.sh), the systemd units, the preset layouts, the
# LICENSE and the service/cluster examples; make uninstall removes exactly
# those files (INSTALLED lists them for both) and the directories of ours
# they leave empty. A real install (DESTDIR empty) into one of the loader's
# directories runs ldconfig (as root), so that libwcache.so.0 loads at once;
# elsewhere a line says how it is found (tools/dist/ldconfig.sh).

BINDIR     ?= $(PREFIX)/bin
LIBDIR     ?= $(PREFIX)/lib
INCLUDEDIR ?= $(PREFIX)/include
DATADIR    ?= $(PREFIX)/share
MANDIR     ?= $(DATADIR)/man
DOCDIR     ?= $(DATADIR)/doc/wcache
SYSCONFDIR ?= /etc
UNITDIR    ?= $(PREFIX)/lib/systemd/system
SYSUSERSDIR ?= $(PREFIX)/lib/sysusers.d
PCDIR      ?= $(LIBDIR)/pkgconfig
LDCONFIG   ?=
LAYOUTDIR  := $(DATADIR)/wcache/layouts
# where the layout presets are found (proto/plan/layout.c, plan_layout_dir):
# this source tree, else next to the binary, else where install puts them
$(BUILD)/obj/proto/plan/layout.o: WC_CPPFLAGS += -DWC_LAYOUT_SRC_DIR='"$(CURDIR)/proto/plan/layouts"' \
	-DWC_LAYOUT_INSTALL_DIR='"$(LAYOUTDIR)"'

VERSION  := $(shell sed -n 's/^\#define WCACHE_VERSION "\(.*\)"/\1/p' $(wildcard tools/common/*.h))
UNITS    := wcd@.service wcache.service
LAYOUTS  := $(wildcard proto/plan/layouts/*.layout)
EXAMPLES := $(wildcard tools/dist/k8s/*.yaml tools/dist/slurm/*.sbatch)
HEADERS  := tools/libwcache/wcache.h reactor/wcreactor.h
D        := $(DESTDIR)

INSTALLED := $(addprefix $(BINDIR)/,$(TOOLS)) \
	$(addprefix $(LIBDIR)/,$(notdir $(LIBS)) libwcache.so.0 libwcache.so) \
	$(addprefix $(INCLUDEDIR)/,$(notdir $(HEADERS))) $(PCDIR)/wcache.pc \
	$(MAN8:%=$(MANDIR)/man8/%.8) $(MAN1:%=$(MANDIR)/man1/%.1) \
	$(addprefix $(UNITDIR)/,$(UNITS)) $(SYSUSERSDIR)/wcache.conf \
	$(addprefix $(LAYOUTDIR)/,$(notdir $(LAYOUTS))) \
	$(DOCDIR)/LICENSE $(DOCDIR)/examples/wcd-0.env $(DOCDIR)/examples/wcache.env \
	$(addprefix $(DOCDIR)/examples/,$(notdir $(EXAMPLES)))
OUR_DIRS := $(LAYOUTDIR) $(DATADIR)/wcache $(DOCDIR)/examples $(DOCDIR)

man: $(MANS)
$(BUILD)/man/%.8: $(BUILD)/bin/% tools/dist/man/mkman.sh
	$(call say,MAN,$@)
	@mkdir -p $(@D)
	$(Q)tools/dist/man/mkman.sh $< 8 >$@
$(BUILD)/man/%.1: $(BUILD)/bin/% tools/dist/man/mkman.sh
	$(call say,MAN,$@)
	@mkdir -p $(@D)
	$(Q)tools/dist/man/mkman.sh $< 1 >$@

# the paths of this install in a template (units, pkg-config, examples)
subst = sed -e 's|@PREFIX@|$(PREFIX)|g' -e 's|@BINDIR@|$(BINDIR)|g' \
	-e 's|@LIBDIR@|$(LIBDIR)|g' -e 's|@INCLUDEDIR@|$(INCLUDEDIR)|g' \
	-e 's|@SYSCONFDIR@|$(SYSCONFDIR)|g' -e 's|@VERSION@|$(VERSION)|g' \
	-e 's|@SYSUSERSDIR@|$(SYSUSERSDIR)|g' \
	-e 's|@CUDA_LIBS@|$(CUDA_LIBS)|g'

install: $(LIBS) $(SO_CLIENT) $(SO_CLIENT).0 $(BINS) $(MANS)
	install -d $(D)$(BINDIR) $(D)$(LIBDIR) $(D)$(INCLUDEDIR) $(D)$(PCDIR) \
		$(D)$(MANDIR)/man8 $(D)$(MANDIR)/man1 $(D)$(UNITDIR) $(D)$(SYSUSERSDIR) $(D)$(DOCDIR)/examples \
		$(if $(LAYOUTS),$(D)$(LAYOUTDIR))
	install -m 0755 $(BINS) $(D)$(BINDIR)/
	install -m 0644 $(LIBS) $(D)$(LIBDIR)/
	install -m 0755 $(SO_CLIENT) $(D)$(LIBDIR)/libwcache.so.0
	ln -sf libwcache.so.0 $(D)$(LIBDIR)/libwcache.so
	install -m 0644 $(HEADERS) $(D)$(INCLUDEDIR)/
	$(subst) tools/dist/wcache.pc.in >$(D)$(PCDIR)/wcache.pc
	install -m 0644 $(MAN8:%=$(BUILD)/man/%.8) $(D)$(MANDIR)/man8/
	install -m 0644 $(MAN1:%=$(BUILD)/man/%.1) $(D)$(MANDIR)/man1/
	for u in $(UNITS); do $(subst) tools/dist/systemd/$$u.in >$(D)$(UNITDIR)/$$u || exit 1; done
	install -m 0644 tools/dist/systemd/wcache.sysusers $(D)$(SYSUSERSDIR)/wcache.conf
	$(if $(LAYOUTS),install -m 0644 $(LAYOUTS) $(D)$(LAYOUTDIR)/)
	install -m 0644 tools/dist/LICENSE $(D)$(DOCDIR)/LICENSE
	$(subst) tools/dist/systemd/wcd.env.example >$(D)$(DOCDIR)/examples/wcd-0.env
	$(subst) tools/dist/systemd/wcache.env.example >$(D)$(DOCDIR)/examples/wcache.env
	$(if $(EXAMPLES),install -m 0644 $(EXAMPLES) $(D)$(DOCDIR)/examples/)
	@$(if $(DESTDIR),:,LDCONFIG="$(LDCONFIG)" tools/dist/ldconfig.sh $(LIBDIR) $(PCDIR))

uninstall:
	rm -f $(addprefix $(D),$(INSTALLED))
	@for d in $(addprefix $(D),$(OUR_DIRS)); do [ ! -d $$d ] || rmdir --ignore-fail-on-non-empty $$d; done

# The Python package wcache (pure Python over libwcache.so, tools/libwcache/
# python) into Debian's python3: /usr/local/lib/python3.X/dist-packages (under
# DESTDIR when set). Offline: the package builds with its own backend
# (tools/libwcache/python/_build), no index is asked. Debian's pip refuses to
# install for the system interpreter (PEP 668) unless told
# --break-system-packages: /usr/local is the place apt leaves to us. The
# package finds libwcache.so.0 beside it (make install under the same
# prefix), through pkg-config, the loader (make install ran ldconfig) or
# $WCACHE_LIB. In a venv, `pip install tools/libwcache/python` is the same.
python-install: deps-python
	$(PYTHON) -m pip install --no-deps --no-index --no-build-isolation \
		--break-system-packages $(if $(DESTDIR),--root $(DESTDIR)) tools/libwcache/python

clean:
	rm -rf build build-* 
