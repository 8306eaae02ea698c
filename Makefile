# ckpt-harness — build, test, benchmark.
#
#   make              build build/ckpt-harness
#   make check        build and run every test (Check suites + CLI tests)
#   make check-asan   the same under AddressSanitizer + UndefinedBehaviorSanitizer
#   make check-tsan   the cpu backend's threaded tests and runs under ThreadSanitizer
#   make run-cases    run every shipped case, reports into build/reports/
#   make bench        print timing tables (never part of check; docs/cpu-backend.md)
#   make check-tf     the TensorFlow example, where TF_PYTHON imports tensorflow
#   make check-keras  the Keras driver's tests, where KERAS_PYTHON imports tensorflow
#   make install      the program, the CUDA module (where built) and the man page under
#                     $(DESTDIR)$(PREFIX) (PREFIX=/usr/local)
#
# Knobs (override on the command line): BUILD, CC, OPT, SAN; NVCC_CCBIN (the CUDA host compiler).

CC      ?= cc
BUILD   ?= build
OPT     ?= -O2
SAN     ?=
PKG_CONFIG ?= pkg-config

# check, run-cases, check-asan and bench first install missing dependencies
# (scripts/install-deps.sh), then build in a sub-make; other goals need them present.
ENTRY_GOALS := check run-cases check-asan check-tsan check-cpu-only check-no-cuda-libs bench deps clean
ifneq ($(filter-out $(ENTRY_GOALS),$(or $(MAKECMDGOALS),all)),)
  ifneq ($(shell $(PKG_CONFIG) --exists libcjson && echo yes),yes)
    $(error libcjson not found by pkg-config: run ./scripts/install-deps.sh or 'apt-get install libcjson-dev')
  endif
endif
CJSON_LIBS := $(shell $(PKG_CONFIG) --libs libcjson 2>/dev/null)

CHECK_OK := $(shell $(PKG_CONFIG) --exists check && echo yes)
CHECK_CFLAGS := $(if $(CHECK_OK),$(shell $(PKG_CONFIG) --cflags check))
CHECK_LIBS   := $(if $(CHECK_OK),$(shell $(PKG_CONFIG) --libs check))

WARN    := -Wall -Wextra -Werror -Wshadow -Wno-unused-parameter
CFLAGS  ?=
# -ffp-contract=off: no compiler fuses a * b + c into an fma behind the code's back (GCC
# already does not in C11 mode; Clang does in functions whose target has FMA), so every
# ISA path and compiler sees the same operations (docs/cpu-backend.md, determinism rule 7)
CFLAGS  += -std=c11 -ffp-contract=off $(OPT) -g $(WARN) $(SAN) -D_POSIX_C_SOURCE=200809L -D_DEFAULT_SOURCE \
           -I. -MMD -MP
LDLIBS  += $(CJSON_LIBS) -lm
LDLIBS  += -lz -ldl -lpthread
LDFLAGS += $(SAN)

# One folder per layer (CONTRIBUTING.md, "How it works"): harness/{core,io,model,engine,verify,compare}
# is the library, harness/cli the program, reports/ the writers, backends/ the registry and
# the CPU backends: ref (the reference) and cpu (the fast one, docs/cpu-backend.md); the
# CUDA backend is a module of its own, see the CUDA block.
LAYERS  := harness/core harness/io harness/model harness/engine harness/verify harness/compare \
           harness/model/ops reports backends backends/check backends/ref backends/cpu
LIB_SRC := $(sort $(foreach d,$(LAYERS),$(wildcard $(d)/*.c)))
CLI_SRC := $(sort $(wildcard harness/cli/*.c))
TEST_SRC := $(sort $(wildcard tests/*.c))

LIB_OBJ  := $(LIB_SRC:%.c=$(BUILD)/obj/%.o)
TEST_OBJ := $(TEST_SRC:%.c=$(BUILD)/obj/%.o)
MAIN_OBJ := $(CLI_SRC:%.c=$(BUILD)/obj/%.o)

PROG := $(BUILD)/ckpt-harness
LIB  := $(BUILD)/libckpt.a
TESTS := $(BUILD)/check_runner

.PHONY: all deps check check-run check-seed check-asan check-tsan check-tsan-run run-cases run-cases-run bench bench-run bench-origin clean

all: $(PROG)

# ---------------------------------------------------------------------------------------
# CUDA backend (backends/cuda/, docs/cuda.md). Knobs: CUDA = auto | 1 | 0, CUDA_HOME, NVCC,
# CUDNN_HOME, CUDA_ARCH. `auto` builds the backend wherever $(NVCC) and cuDNN are found
# (so CI compiles and links it without a GPU) and the CPU-only program elsewhere, where
# the registry answers `--backend cuda` with one line saying so. Sanitizer builds (SAN set, as
# check-asan does) leave CUDA out: ASan's shadow-memory reservation collides with the CUDA
# driver's address-space reservation, and nvcc's device code is not instrumented anyway.
# Switching CUDA on or off needs a clean BUILD (or another one: BUILD=build/nocuda).
#   make cuda-check       the GPU test program: its self-test on two CPU backends, then the
#                         GPU run (skipped, with a message, without a GPU); part of check
#   make check-cpu-only   make check of the CPU-only program, in $(BUILD)/nocuda
#   make gpu-check        tests/gpu/run.sh (the GPU machine's script), reports in GPU_OUT
# ---------------------------------------------------------------------------------------
CUDA_HOME  ?= /usr/local/cuda
NVCC       ?= $(CUDA_HOME)/bin/nvcc
CUDNN_HOME ?=
CUDA       ?= auto
CUDA_ARCH  ?= -gencode arch=compute_90,code=sm_90 -gencode arch=compute_90,code=compute_90
GPU_OUT    ?= $(BUILD)/gpu-report

ifeq ($(filter auto 0 1,$(CUDA)),)
  $(error CUDA=$(CUDA): use auto, 1 or 0)
endif
CUDA_NVCC_FOUND := $(if $(filter 0,$(CUDA)),,$(shell command -v $(NVCC) 2>/dev/null))
CUDNN_INC := $(firstword $(foreach d,$(if $(CUDNN_HOME),$(CUDNN_HOME)/include) \
    /usr/include/x86_64-linux-gnu $(CUDA_HOME)/include /usr/local/include /usr/include, \
    $(if $(wildcard $(d)/cudnn.h),$(d))))
CUDNN_LIBDIR := $(firstword $(foreach d,$(if $(CUDNN_HOME),$(CUDNN_HOME)/lib $(CUDNN_HOME)/lib64) \
    /usr/lib/x86_64-linux-gnu $(CUDA_HOME)/lib64 $(CUDA_HOME)/lib, \
    $(if $(wildcard $(d)/libcudnn.so $(d)/libcudnn.so.9),$(d))))
CUDA_LIBDIR := $(firstword $(foreach d,$(CUDA_HOME)/lib64 $(CUDA_HOME)/lib, \
    $(if $(wildcard $(d)/libcudart.so),$(d))))

CUDA_OFF_WHY :=
ifeq ($(CUDA),0)
  CUDA_OFF_WHY := CUDA=0
else ifneq ($(SAN),)
  CUDA_OFF_WHY := sanitizer build (SAN is set)
else ifeq ($(CUDA_NVCC_FOUND),)
  CUDA_OFF_WHY := nvcc not found
else ifeq ($(CUDNN_INC),)
  CUDA_OFF_WHY := nvcc found but cudnn.h not found
else ifeq ($(CUDNN_LIBDIR),)
  CUDA_OFF_WHY := nvcc found but libcudnn not found
else ifeq ($(CUDA_LIBDIR),)
  CUDA_OFF_WHY := nvcc found but libcudart not found under $(CUDA_HOME)
endif
ifeq ($(CUDA)$(if $(CUDA_OFF_WHY),off),1off)
  $(error CUDA=1 but $(CUDA_OFF_WHY) (set CUDA_HOME, NVCC or CUDNN_HOME))
endif

# the backend's plain-C parts (algorithm policy and pinning, the direct fp64 convolution's
# geometry) are always built into the library: tests/test_cuda_algo_policy.c checks them on the CPU
CUDA_PURE_C := $(filter-out backends/cuda/cuda_module.c,$(sort $(wildcard backends/cuda/*.c)))
LIB_SRC += $(CUDA_PURE_C)
LIB_OBJ += $(CUDA_PURE_C:%.c=$(BUILD)/obj/%.o)
GPU_TEST := $(BUILD)/test_gpu

ifeq ($(CUDA_OFF_WHY),)
  # The CUDA backend is a module, $(BUILD)/ckpt-harness-cuda.so, that the registry
  # (backends/registry.c) loads with dlopen when --backend cuda is asked for: the program
  # itself links no CUDA library and runs on machines without them. The module carries
  # its own position-independent copies of the core and the shared host checks.
  CUDA_SRC := $(sort $(wildcard backends/cuda/*.cu))
  CUDA_OBJ := $(CUDA_SRC:%.cu=$(BUILD)/pic/%.o)
  CUDA_MODULE := $(BUILD)/ckpt-harness-cuda.so
  CUDA_MODULE_C := $(sort $(wildcard harness/core/*.c)) $(sort $(wildcard backends/check/*.c)) \
                   $(CUDA_PURE_C) backends/cuda/cuda_module.c
  CUDA_MODULE_OBJ := $(CUDA_OBJ) $(CUDA_MODULE_C:%.c=$(BUILD)/pic/%.o)
  CFLAGS   += -DCK_HAVE_CUDA=1 -DCK_CUDA_MODULE_BUILT=1
  SYS_LIBDIRS := /usr/lib/x86_64-linux-gnu /usr/lib /lib
  CK_COMMA := ,
  CUDA_LDLIBS := -L$(CUDA_LIBDIR) $(if $(filter-out $(CUDA_LIBDIR),$(CUDNN_LIBDIR)),-L$(CUDNN_LIBDIR)) \
                 $(if $(wildcard $(CUDNN_LIBDIR)/libcudnn.so),-lcudnn,-l:libcudnn.so.9) \
                 -lcublas -lcudart -lstdc++ -ldl -Wl,-rpath,$(CUDA_LIBDIR) \
                 $(if $(filter-out $(SYS_LIBDIRS) $(CUDA_LIBDIR),$(CUDNN_LIBDIR)),-Wl$(CK_COMMA)-rpath$(CK_COMMA)$(CUDNN_LIBDIR))
  NVCCFLAGS ?=
  # NVCC_CCBIN=clang: the CUDA host code through another host compiler (CI's second compiler)
  NVCCFLAGS += $(if $(NVCC_CCBIN),-ccbin $(NVCC_CCBIN))
  NVCCFLAGS += -std=c++17 $(OPT) -g $(CUDA_ARCH) -fmad=false --Werror all-warnings \
               -Xcompiler -fPIC,-Wall,-Wextra,-Werror,-Wshadow,-Wno-unused-parameter \
               -I. $(if $(filter /usr/include,$(CUDNN_INC)),,-I$(CUDNN_INC)) -MMD -MP

  all: $(CUDA_MODULE)
  check-run: $(CUDA_MODULE)
  run-cases-run: $(CUDA_MODULE)

  $(CUDA_MODULE): $(CUDA_MODULE_OBJ)
	$(CC) -shared -Wl,--no-undefined -o $@ $^ $(CUDA_LDLIBS) -lm

  # the GPU test program links the backend directly (it is the backend's own test)
  $(GPU_TEST): $(BUILD)/obj/tests/gpu/test_gpu.o $(BUILD)/obj/tests/backend_ops.o $(CUDA_OBJ) $(LIB)
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS) $(CUDA_LDLIBS)

  # the GPU test program checks itself with a second CPU backend, then runs on the GPU
  # where the CUDA libraries are absent the program cannot start: say so instead of failing
  cuda-check: $(GPU_TEST)
	@if ldd $(GPU_TEST) | grep -q 'not found'; then \
	    echo "ckpt-harness: GPU tests skipped: the CUDA libraries are not installed here"; exit 0; fi; \
	$(GPU_TEST) --cpu-as-gpu --quick >$(BUILD)/test_gpu_selftest.log 2>&1 || \
	    { cat $(BUILD)/test_gpu_selftest.log; exit 1; }
	@echo "test_gpu --cpu-as-gpu: $$(tail -n 1 $(BUILD)/test_gpu_selftest.log)"
	$(GPU_TEST) --quick
else
  # one notice per make invocation tree (sub-makes inherit CK_CUDA_NOTICE_SHOWN)
  ifeq ($(CK_CUDA_NOTICE_SHOWN),)
    ifneq ($(filter-out clean deps,$(or $(MAKECMDGOALS),all)),)
      ifeq ($(CUDA_OFF_WHY),nvcc not found)
        $(info ckpt-harness: nvcc not found: building the CPU-only program (set CUDA_HOME to build the CUDA backend))
      else
        $(info ckpt-harness: $(CUDA_OFF_WHY): building the CPU-only program without the CUDA backend)
      endif
      export CK_CUDA_NOTICE_SHOWN := 1
    endif
  endif

  cuda-check:
	@echo "ckpt-harness: GPU tests skipped: this is the CPU-only program ($(CUDA_OFF_WHY))"
endif

check-run: cuda-check

check-cpu-only: deps
	@$(MAKE) --no-print-directory check-run BUILD=$(BUILD)/nocuda CUDA=0

# The CUDA build on a machine without the CUDA libraries: the program must link none of
# them, every CPU test must pass with the module unloadable, and --backend cuda must be one
# line and exit 2.
check-no-cuda-libs: deps
	@$(MAKE) --no-print-directory check-no-cuda-libs-run

check-no-cuda-libs-run: $(PROG) $(TESTS)
	@if ldd $(PROG) | grep -E 'libcud|libcublas'; then \
	    echo "FAIL: $(PROG) links a CUDA library"; exit 1; fi
	CK_CUDA_MODULE=/nonexistent/ckpt-harness-cuda.so sh tests/cli/no_cuda_libs.sh $(PROG)
	CK_CUDA_MODULE=/nonexistent/ckpt-harness-cuda.so CK_PROG=$(PROG) sh tests/cli/run.sh
	CK_CUDA_MODULE=/nonexistent/ckpt-harness-cuda.so CK_PROG=$(PROG) CK_ROOT=$(CURDIR) $(TESTS)

gpu-check:
	bash tests/gpu/run.sh $(GPU_OUT)

# What tests/gpu/run.sh builds: the program, and where this build has the CUDA backend the
# module and the GPU test program (one path a line); the reason on stderr when it has not.
print-gpu-targets:
	@echo $(PROG)
	@$(if $(CUDA_MODULE),echo $(CUDA_MODULE); echo $(GPU_TEST),echo "no CUDA backend in this build: $(CUDA_OFF_WHY)" >&2)

.PHONY: cuda-check check-cpu-only check-no-cuda-libs check-no-cuda-libs-run gpu-check print-gpu-targets
-include $(CUDA_OBJ:.o=.d) $(CUDA_MODULE_OBJ:.o=.d) $(BUILD)/obj/tests/gpu/test_gpu.d
# --------------------------------------------------------------- end of the CUDA block ---

# Objects depend on a stamp named after the compile configuration, so switching CUDA,
# OPT or SAN in one BUILD directory rebuilds everything instead of mixing old objects.
CONFIG_ID    := $(shell printf '%s' '$(CC) $(CFLAGS) $(NVCCFLAGS) $(CUDA_OFF_WHY)' | cksum | cut -d' ' -f1)
CONFIG_STAMP := $(BUILD)/.config-$(CONFIG_ID)
$(CONFIG_STAMP):
	@mkdir -p $(BUILD)
	@rm -f $(BUILD)/.config-*
	@touch $@

$(BUILD)/obj/%.o: %.c $(CONFIG_STAMP)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -c $< -o $@

# position-independent objects for the CUDA module
$(BUILD)/pic/%.o: %.c $(CONFIG_STAMP)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -fPIC -fvisibility=hidden -c $< -o $@

$(BUILD)/pic/%.o: %.cu $(CONFIG_STAMP)
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCCFLAGS) -c $< -o $@

# Build facts for the run metadata (harness/cli/build_info.c): the commit, the compiler and
# the flags. Only build_info.o sees them, and it alone rebuilds when the commit changes.
PREFIX  ?= /usr/local
LIBDIR_INSTALL := $(PREFIX)/lib/ckpt-harness
CK_GIT_COMMIT := $(shell git rev-parse --short=12 HEAD 2>/dev/null || echo unknown)
CK_CC_VERSION := $(shell $(CC) -dumpfullversion 2>/dev/null || $(CC) -dumpversion 2>/dev/null)
CK_CFLAGS_TEXT := $(strip $(filter-out -MMD -MP -I. -g,$(CFLAGS)))
COMMIT_STAMP := $(BUILD)/.commit-$(CK_GIT_COMMIT)
$(COMMIT_STAMP):
	@mkdir -p $(BUILD)
	@rm -f $(BUILD)/.commit-*
	@touch $@
$(BUILD)/obj/harness/cli/build_info.o: $(COMMIT_STAMP)
$(BUILD)/obj/harness/cli/build_info.o: CFLAGS += -DCK_GIT_COMMIT='"$(CK_GIT_COMMIT)"' \
    -DCK_BUILD_COMPILER='"$(notdir $(CC)) $(CK_CC_VERSION)"' \
    -DCK_BUILD_CFLAGS='"$(CK_CFLAGS_TEXT)"'
# the installed program finds the CUDA module in $(PREFIX)/lib/ckpt-harness (the registry
# looks beside the program first)
PREFIX_STAMP := $(BUILD)/.prefix-$(shell printf '%s' '$(LIBDIR_INSTALL)' | cksum | cut -d' ' -f1)
$(PREFIX_STAMP):
	@mkdir -p $(BUILD)
	@rm -f $(BUILD)/.prefix-*
	@touch $@
ifneq ($(CUDA_MODULE),)
$(BUILD)/obj/backends/registry.o: $(PREFIX_STAMP)
$(BUILD)/obj/backends/registry.o: CFLAGS += -DCK_LIBDIR='"$(LIBDIR_INSTALL)"'
endif

$(LIB): $(LIB_OBJ)
	@rm -f $@
	ar rcs $@ $^

$(PROG): $(MAIN_OBJ) $(LIB)
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)

# The Check runner: every tests/test_*.c defines `Suite *suite_<name>(void)`; the list is
# generated so adding a suite needs no edit elsewhere.
$(BUILD)/gen/suites.h: $(TEST_SRC)
	@mkdir -p $(dir $@)
	@grep -ho '^Suite \*suite_[a-z0-9_]*(void)' $(TEST_SRC) | sed 's/^Suite \*\(suite_[a-z0-9_]*\)(void)/CK_SUITE(\1)/' > $@.tmp
	@cmp -s $@.tmp $@ 2>/dev/null && rm -f $@.tmp || mv $@.tmp $@

$(BUILD)/obj/tests/%.o: CFLAGS += $(CHECK_CFLAGS) -I$(BUILD)/gen
$(BUILD)/obj/tests/check_main.o: $(BUILD)/gen/suites.h

$(TESTS): $(TEST_OBJ) $(LIB)
	$(CC) $(LDFLAGS) -o $@ $^ $(CHECK_LIBS) $(LDLIBS)

# The allocation-failure sweep (tests/oom/oom_sweep.c): the library's malloc, calloc,
# realloc and strdup wrapped at link time so each allocation of a scenario fails once in
# turn; part of check-run, so check-asan also proves that no failure path leaks.
OOM_SWEEP := $(BUILD)/oom_sweep
OOM_WRAP  := -Wl,--wrap=malloc,--wrap=calloc,--wrap=realloc,--wrap=strdup
$(OOM_SWEEP): $(BUILD)/obj/tests/oom/oom_sweep.o $(LIB)
	$(CC) $(LDFLAGS) $(OOM_WRAP) -o $@ $^ $(LDLIBS)

-include $(BUILD)/obj/tests/oom/oom_sweep.d # header changes rebuild it (a stale one corrupts)

oom-sweep: $(OOM_SWEEP)
	$(OOM_SWEEP) $(CURDIR)

.PHONY: oom-sweep

deps:
	@sh scripts/install-deps.sh

check: deps
	@$(MAKE) --no-print-directory check-run

check-run: $(PROG) $(TESTS) $(OOM_SWEEP)
	python3 tests/layout/check_layers.py
	python3 tests/layout/test_check_layers.py
	python3 scripts/update_op_docs.py --check $(PROG)
	python3 tests/mutation/run.py --check
	$(OOM_SWEEP) $(CURDIR)
	CK_PROG=$(PROG) sh tests/cli/run.sh
	CK_PROG=$(PROG) sh tests/cli/compare.sh
	CK_PROG=$(PROG) sh tests/cli/precision.sh
	CK_PROG=$(PROG) CK_GPU_BUILD_DIR=$(BUILD) CC='$(CC)' OPT='$(OPT)' SAN='$(SAN)' CUDA='$(CUDA)' \
	    sh tests/cli/gpu_script.sh
	sh tests/cli/makefile.sh
	CK_PROG=$(PROG) sh tests/cli/onnx.sh
	CK_PROG=$(PROG) sh tests/interop/run.sh
	CK_PROG=$(PROG) CK_PYTHON=$(KERAS_PYTHON) sh tests/interop/run_keras.sh
	CK_PROG=$(PROG) CK_OUT=$(BUILD)/test-out sh tests/cli/ci.sh
	CK_PROG=$(PROG) CK_OUT=$(BUILD)/test-out sh tests/cli/browser.sh
	CK_PROG=$(PROG) sh tests/cli/robustness.sh
	CK_PROG=$(PROG) sh tests/cli/text_width.sh
	CK_PROG=$(PROG) sh tests/cli/hostile_inputs.sh
	CK_PROG=$(PROG) CK_ROOT=$(CURDIR) $(TESTS)

check-asan: deps
	@$(MAKE) --no-print-directory check-run BUILD=build/asan OPT=-O1 \
	    SAN="-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=all"

# ThreadSanitizer: the fast cpu backend's Check suites (threaded kernels, 1/2/3 threads;
# split delegated ops; whole cases; the op table on cpu) and
# threaded runs of shipped cases through the program (--threads 2). The whole suite under
# TSan would take far longer than check's budget; everything threaded is in these.
check-tsan: deps
	@$(MAKE) --no-print-directory check-tsan-run BUILD=build/tsan OPT=-O1 CUDA=0 \
	    SAN="-fsanitize=thread -fno-omit-frame-pointer"

check-tsan-run: $(PROG) $(TESTS)
	TSAN_OPTIONS=halt_on_error=1 CK_TIMEOUT_MULTIPLIER=4 CK_RUN_SUITE=cpu_kernels CK_ROOT=$(CURDIR) $(TESTS)
	TSAN_OPTIONS=halt_on_error=1 CK_TIMEOUT_MULTIPLIER=4 CK_RUN_SUITE=cpu_cases CK_ROOT=$(CURDIR) $(TESTS)
	TSAN_OPTIONS=halt_on_error=1 CK_TIMEOUT_MULTIPLIER=4 CK_RUN_SUITE=cpu_delegate CK_ROOT=$(CURDIR) $(TESTS)
	TSAN_OPTIONS=halt_on_error=1 CK_TIMEOUT_MULTIPLIER=4 CK_RUN_SUITE=backend_ops CK_OP_BACKEND=cpu \
	    CK_ROOT=$(CURDIR) $(TESTS)
	for c in mlp_dropout cnn_bn unet3d_bn conv1d_seq; do \
	    TSAN_OPTIONS=halt_on_error=1 $(PROG) run cases/$$c.json --threads 2 --dtype fp32,bf16 \
	        --quiet --report $(BUILD)/tsan-$$c.json || exit 1; done

run-cases: deps
	@$(MAKE) --no-print-directory run-cases-run

run-cases-run: $(PROG)
	$(PROG) run cases/ --report $(BUILD)/reports/

# The seed model at 64x64x32 in fp32, fp16 and bf16: non-vacuous gradients, judged
# (minutes on the reference backend; make check runs it at 16x16x8).
check-seed: $(PROG)
	CK_PROG=$(PROG) CK_SEED_FULL=1 sh tests/cli/precision.sh

bench: deps
	@$(MAKE) --no-print-directory bench-run

bench-run: $(PROG) $(BUILD)/sgemm_peak
	sh tests/bench/run.sh $(PROG) $(BUILD)/sgemm_peak

# The origin's 3-D U-Net at full size (1x1x368x368x224) on the cpu backend, verified segment
# by segment under a 24 GB memory limit (docs/memory.md); tens of minutes, about 16 GB.
# Not part of check or bench.
bench-origin: $(PROG)
	sh tests/bench/origin.sh $(PROG)

$(BUILD)/sgemm_peak: $(BUILD)/obj/tests/bench/sgemm_peak.o $(LIB)
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)
-include $(BUILD)/obj/tests/bench/sgemm_peak.d # a change to kernels.h rebuilds it

# The TensorFlow example (examples/tf_recompute_grad_dump.py, docs/interop.md): its control
# run and its documented outcomes, where $(TF_PYTHON) imports tensorflow (a message
# otherwise). Not part of check: TensorFlow is a 300 MB install.
TF_PYTHON ?= python3
check-tf: $(PROG)
	CK_PROG=$(PROG) CK_PYTHON=$(TF_PYTHON) sh tests/interop/run_tf.sh

.PHONY: check-tf

# The Keras driver (python/ckpt_harness/keras, docs/keras.md): its tests under
# $(KERAS_PYTHON), which needs tensorflow and pytest (make check runs them too and skips
# them with one line when that Python lacks either).
KERAS_PYTHON ?= python3
check-keras: $(PROG)
	CK_PROG=$(PROG) CK_PYTHON=$(KERAS_PYTHON) sh tests/interop/run_keras.sh

.PHONY: check-keras
# make install [PREFIX=/usr/local] [DESTDIR=]: the program, the CUDA module where it was
# built, the man page. The program is built with CK_LIBDIR=$(PREFIX)/lib/ckpt-harness, so
# build and install with the same PREFIX.
install: $(PROG) $(CUDA_MODULE)
	install -d $(DESTDIR)$(PREFIX)/bin $(DESTDIR)$(PREFIX)/share/man/man1
	install -m 755 $(PROG) $(DESTDIR)$(PREFIX)/bin/ckpt-harness
	install -m 644 docs/ckpt-harness.1 $(DESTDIR)$(PREFIX)/share/man/man1/ckpt-harness.1
	$(if $(CUDA_MODULE),install -d $(DESTDIR)$(LIBDIR_INSTALL) && \
	    install -m 755 $(CUDA_MODULE) $(DESTDIR)$(LIBDIR_INSTALL)/)

.PHONY: install

# Mutation testing (tests/mutation/): every planted bug of the catalogue in turn, in a
# scratch copy under build/mutation/; prints the score and the survivors. Not part of check
# or CI (about an hour on two cores). MUTANTS=id1,id2 runs a subset, MUTATION_TIMEOUT sets
# the seconds per mutant command, MUTATION_FULL=1 runs all of make check for every mutant.
mutation:
	python3 tests/mutation/run.py $(if $(MUTANTS),--mutants $(MUTANTS))

.PHONY: mutation

clean:
	rm -rf $(BUILD)

-include $(LIB_OBJ:.o=.d) $(TEST_OBJ:.o=.d) $(MAIN_OBJ:.o=.d)

# ---------------------------------------------------------------------------------------
# Fuzzing (libFuzzer; needs clang). Targets in fuzz/, seed corpora in fuzz/corpus/<name>/;
# new inputs go to build/fuzz/corpus/<name>/, crashes to build/fuzz/crash-*.
#   make fuzz                 every target for FUZZ_SECONDS (60) each
#   make fuzz-smoke           every target for 10 s each (CI)
#   make fuzz-safetensors     one target (also fuzz-npy, fuzz-case)
# ---------------------------------------------------------------------------------------
FUZZ_CC      ?= clang
FUZZ_SECONDS ?= 60
FUZZ_BUILD   := build/fuzz
FUZZ_TARGETS := safetensors npy case onnx result_wire judge_input
FUZZ_SAN     := -fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer
FUZZ_CFLAGS  := -std=c11 -ffp-contract=off -O1 -g -Wall -Wextra -Wno-unused-parameter -D_POSIX_C_SOURCE=200809L \
                -D_DEFAULT_SOURCE -I. -MMD -MP $(FUZZ_SAN)
FUZZ_LIB_OBJ := $(LIB_SRC:%.c=$(FUZZ_BUILD)/obj/%.o)

.PHONY: fuzz fuzz-smoke fuzz-build fuzz-seeds-result_wire $(FUZZ_TARGETS:%=fuzz-%)
.SECONDARY: $(FUZZ_LIB_OBJ)

$(FUZZ_BUILD)/obj/%.o: %.c
	@mkdir -p $(dir $@)
	$(FUZZ_CC) $(FUZZ_CFLAGS) -fsanitize=fuzzer-no-link -c $< -o $@

$(FUZZ_BUILD)/fuzz_%: fuzz/fuzz_%.c $(FUZZ_LIB_OBJ)
	@mkdir -p $(dir $@)
	$(FUZZ_CC) $(FUZZ_CFLAGS) -fsanitize=fuzzer -o $@ $^ $(LDLIBS)

fuzz-build: $(FUZZ_TARGETS:%=$(FUZZ_BUILD)/fuzz_%)

$(FUZZ_TARGETS:%=fuzz-%): fuzz-%: $(FUZZ_BUILD)/fuzz_%
	@mkdir -p $(FUZZ_BUILD)/corpus/$*
	$< -max_total_time=$(FUZZ_SECONDS) -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
	    -artifact_prefix=$(FUZZ_BUILD)/crash-$*- $(FUZZ_BUILD)/corpus/$* fuzz/corpus/$*

fuzz: $(FUZZ_TARGETS:%=fuzz-%)

fuzz-smoke:
	@$(MAKE) --no-print-directory fuzz FUZZ_SECONDS=10

# the result_wire seeds, written again by the current encoder (after a wire version change)
$(BUILD)/make_result_wire_seeds: fuzz/make_result_wire_seeds.c fuzz/result_wire_case.h $(LIB)
	$(CC) $(CFLAGS) -o $@ $< $(LIB) $(LDLIBS)

fuzz-seeds-result_wire: $(BUILD)/make_result_wire_seeds
	$< fuzz/corpus/result_wire

-include $(FUZZ_LIB_OBJ:.o=.d)
