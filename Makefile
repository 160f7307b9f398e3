# megatron.h — build, test, train.
#   make           build every program with cc into build/ (and with nvcc, as build/<name>_cuda;
#                  gpt_train, tests/gpu and bench/*.cu through the CUDA emulator, as
#                  build/<name>_emu)
#   make test      install what is missing (as root), build all flavours, run the whole suite
#   make train     train a small GPT on the corpus shipped in data/ and print a sample
#   make train-llama  the same with a small Llama-shaped model (docs/llama.md)
#   make help      every target and the variables a user sets
#
# Programs are discovered, never listed: tests/test_*.c, bench/*.c, tools/*.c, examples/*.cu,
# bench/*.cu (GPU benchmarks: nvcc and the emulator only).
# Tests, benches and tools link one implementation object per flavour (build/obj/impl_*.o:
# `#define MG_IMPLEMENTATION` + every header), so the kernels are compiled once per flavour.
# Examples include the implementation themselves, as a user's program does (cc compiles them
# so); the nvcc builds link impl_cuda.o instead (MG_IMPLEMENTATION_ELSEWHERE, megatron.h).

CC      ?= cc
NVCC    ?= $(shell command -v nvcc 2>/dev/null || ls /usr/local/cuda/bin/nvcc 2>/dev/null)
PYTHON  ?= /usr/bin/python3
BUILD   := build

MPI_CFLAGS := $(shell mpicc --showme:compile 2>/dev/null)
MPI_LIBS   := $(shell mpicc --showme:link 2>/dev/null)
ifneq ($(MPI_LIBS),)
MPI_DEF := -DMG_USE_MPI
endif
BLAS_CFLAGS := -I/usr/include/x86_64-linux-gnu/openblas-pthread
BLAS_LIBS   := -lopenblas

WARN    := -Wall -Wextra -Werror
CFLAGS  ?= -O2 -g -march=native
CFLAGS  += -std=c11 -D_GNU_SOURCE -fno-math-errno $(WARN) -fopenmp -I. $(MPI_DEF) $(MPI_CFLAGS) $(BLAS_CFLAGS)
LDLIBS  := $(MPI_LIBS) $(BLAS_LIBS) -lm -fopenmp
SANFLAGS:= -fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer

CUDA_HOME ?= $(patsubst %/bin/nvcc,%,$(NVCC))
NVARCH  := -gencode arch=compute_80,code=sm_80 -gencode arch=compute_90,code=[sm_90,compute_90]
# The programs' own files hold no kernels (every kernel is in impl_cuda.o; tests/gpu/gpu_ops.c
# is the exception): nvcc compiles them for one virtual architecture (PTX, which a GPU from
# sm_80 on would compile at load), saving a device pass per architecture and file.
NVARCH_PROG := -gencode arch=compute_80,code=compute_80
NVCOMMON:= -O2 -std=c++17 -I. $(MPI_DEF) $(MPI_CFLAGS) $(BLAS_CFLAGS) \
           -Werror all-warnings -Xcompiler -Wall,-Wextra,-Werror,-fopenmp -diag-suppress 177
NVFLAGS := $(NVCOMMON) $(NVARCH)
NVLIBS  := -lcublasLt -lcublas -lnccl -lcudart $(MPI_LIBS) $(BLAS_LIBS) -lm -lgomp

HEADERS := $(wildcard *.h)
TESTHDRS:= $(wildcard tests/*.h) $(wildcard bench/*.h)
TESTS   := $(patsubst tests/%.c,%,$(wildcard tests/test_*.c))
BENCHES := $(patsubst bench/%.c,%,$(wildcard bench/*.c))
TOOLS   := $(patsubst tools/%.c,%,$(wildcard tools/*.c))
EXAMPLES:= $(patsubst examples/%.cu,%,$(wildcard examples/*.cu))
GPUBENCH:= $(patsubst bench/%.cu,%,$(wildcard bench/*.cu))
GPUTESTS:= $(patsubst tests/gpu/%.c,%,$(wildcard tests/gpu/*.c))
LINKED  := $(TESTS) $(BENCHES) $(TOOLS)

CPU_PROGS  := $(addprefix $(BUILD)/,$(LINKED) $(EXAMPLES))
ASAN_PROGS := $(addprefix $(BUILD)/,$(addsuffix _asan,$(TESTS)))
ifneq ($(NVCC),)
CUDA_PROGS := $(addprefix $(BUILD)/,$(addsuffix _cuda,$(LINKED) $(EXAMPLES) $(GPUTESTS) $(GPUBENCH)))
endif

.PHONY: all cpu cuda emu asan test deps oracle train train-llama clean help
all: cpu cuda emu
cpu: $(CPU_PROGS)
cuda: $(CUDA_PROGS)
asan: $(ASAN_PROGS)

$(BUILD)/obj/impl.c: $(HEADERS) | $(BUILD)/obj
	printf '#define MG_IMPLEMENTATION\n' > $@
	for h in $(HEADERS); do printf '#include "%s"\n' $$h >> $@; done
$(BUILD)/obj:
	mkdir -p $@

# --- cpu flavour (cc) ---------------------------------------------------------------------------
$(BUILD)/obj/impl_cpu.o: $(BUILD)/obj/impl.c $(HEADERS)
	$(CC) $(CFLAGS) -c $< -o $@
$(BUILD)/%.o: tests/%.c $(HEADERS) $(TESTHDRS) | $(BUILD)/obj
	$(CC) $(CFLAGS) -c $< -o $@
$(BUILD)/%.o: bench/%.c $(HEADERS) $(TESTHDRS) | $(BUILD)/obj
	$(CC) $(CFLAGS) -c $< -o $@
$(BUILD)/%.o: tools/%.c $(HEADERS) | $(BUILD)/obj
	$(CC) $(CFLAGS) -c $< -o $@
$(addprefix $(BUILD)/,$(LINKED)): $(BUILD)/%: $(BUILD)/%.o $(BUILD)/obj/impl_cpu.o
	$(CC) $^ -o $@ $(LDLIBS)
$(addprefix $(BUILD)/,$(EXAMPLES)): $(BUILD)/%: examples/%.cu $(HEADERS) | $(BUILD)/obj
	$(CC) $(CFLAGS) -x c $< -o $@ $(LDLIBS)

# tools/mg_prepare reads .jsonl.gz input through zlib (zlib1g-dev, tools/install-deps.sh)
$(BUILD)/mg_prepare: LDLIBS += -lz
$(BUILD)/mg_prepare_cuda: NVLIBS += -lz

# --- asan flavour (cc, AddressSanitizer + UndefinedBehaviorSanitizer) ----------------------------
$(BUILD)/obj/impl_asan.o: $(BUILD)/obj/impl.c $(HEADERS)
	$(CC) $(CFLAGS) $(SANFLAGS) -c $< -o $@
$(BUILD)/%_asan: tests/%.c $(BUILD)/obj/impl_asan.o $(HEADERS) $(TESTHDRS)
	$(CC) $(CFLAGS) $(SANFLAGS) $< $(BUILD)/obj/impl_asan.o -o $@ $(LDLIBS) $(SANFLAGS)

# --- cuda flavour (nvcc; sm_80 + sm_90; runs on the CPU where no GPU is present) ----------------
$(BUILD)/obj/impl_cuda.o: $(BUILD)/obj/impl.c $(HEADERS)
	$(NVCC) $(NVFLAGS) -x cu -c $< -o $@
$(BUILD)/%_cuda.o: tests/%.c $(HEADERS) $(TESTHDRS) | $(BUILD)/obj
	$(NVCC) $(NVCOMMON) $(NVARCH_PROG) -x cu -c $< -o $@
$(BUILD)/%_cuda.o: tests/gpu/%.c $(HEADERS) $(TESTHDRS) | $(BUILD)/obj
	$(NVCC) $(NVFLAGS) -x cu -c $< -o $@
$(BUILD)/%_cuda.o: bench/%.c $(HEADERS) $(TESTHDRS) | $(BUILD)/obj
	$(NVCC) $(NVCOMMON) $(NVARCH_PROG) -x cu -c $< -o $@
$(BUILD)/%_cuda.o: tools/%.c $(HEADERS) | $(BUILD)/obj
	$(NVCC) $(NVCOMMON) $(NVARCH_PROG) -x cu -c $< -o $@
# examples/*.cu and bench/*.cu (GPU benchmarks: nvcc only) define MG_IMPLEMENTATION themselves;
# here they skip it (MG_IMPLEMENTATION_ELSEWHERE, megatron.h) and link impl_cuda.o, so nvcc
# compiles the kernels once, not once per program (each compile takes minutes).
$(BUILD)/%_cuda.o: examples/%.cu $(HEADERS) | $(BUILD)/obj
	$(NVCC) $(NVCOMMON) $(NVARCH_PROG) -DMG_IMPLEMENTATION_ELSEWHERE -c $< -o $@
$(BUILD)/%_cuda.o: bench/%.cu $(HEADERS) | $(BUILD)/obj
	$(NVCC) $(NVCOMMON) $(NVARCH_PROG) -DMG_IMPLEMENTATION_ELSEWHERE -c $< -o $@
$(addprefix $(BUILD)/,$(addsuffix _cuda,$(LINKED) $(GPUTESTS) $(EXAMPLES) $(GPUBENCH))): $(BUILD)/%_cuda: $(BUILD)/%_cuda.o $(BUILD)/obj/impl_cuda.o
	$(NVCC) $(NVARCH) $^ -o $@ $(NVLIBS)

# --- emu flavour: the CUDA path through the CUDA emulator (tests/cuda_emu/README.md) ----------
# g++ compiles the .cu/.c sources as CUDA C++ against tests/cuda_emu's headers; every load and
# store calls the emulator's checks (-fsanitize=thread's hooks, linked without its runtime), and
# every typed access is checked for its type's alignment (-fsanitize=alignment: a vector load
# from an address its width does not divide stops the program, as it faults on a GPU).
# -fno-tree-sra keeps a whole float4/uint4 load or store one 16-byte access, as nvcc's
# ld/st.v4 is, instead of four 4-byte ones (the shared-memory bank model counts accesses).
# cuda_emu.o, the emulator itself, is compiled without them.
CXX     ?= g++
EMU_DIR := tests/cuda_emu
EMU_HDRS:= $(wildcard $(EMU_DIR)/*.h)
EMU_FLAGS := -O2 -g -std=c++17 -D_GNU_SOURCE $(WARN) -fopenmp -I. $(MPI_DEF) $(MPI_CFLAGS) \
           $(BLAS_CFLAGS) -DMG_CUDA_EMU -D__CUDACC__ -I$(EMU_DIR) -include cuda_runtime.h \
           -fsanitize=thread --param tsan-instrument-func-entry-exit=0 \
           -fsanitize=alignment -fno-sanitize-recover=alignment -fno-tree-sra
EMU_PROGS := $(addprefix $(BUILD)/,$(addsuffix _emu,gpt_train $(GPUTESTS) $(GPUBENCH)) emu_test)
emu: $(EMU_PROGS)
$(BUILD)/obj/cuda_emu.o: $(EMU_DIR)/cuda_emu.cpp $(EMU_HDRS) | $(BUILD)/obj
	$(CXX) -O2 -g -std=c++17 -D_GNU_SOURCE $(WARN) -DMG_CUDA_EMU -I$(EMU_DIR) $(MPI_DEF) \
	  $(MPI_CFLAGS) $(BLAS_CFLAGS) -c $< -o $@
$(BUILD)/obj/impl_emu.o: $(BUILD)/obj/impl.c $(HEADERS) $(EMU_HDRS)
	$(CXX) $(EMU_FLAGS) -x c++ -c $< -o $@
$(BUILD)/%_emu.o: tests/gpu/%.c $(HEADERS) $(TESTHDRS) $(EMU_HDRS) | $(BUILD)/obj
	$(CXX) $(EMU_FLAGS) -x c++ -c $< -o $@
$(BUILD)/emu_test.o: $(EMU_DIR)/emu_test.cu $(EMU_HDRS) | $(BUILD)/obj
	$(CXX) $(EMU_FLAGS) -x c++ -c $< -o $@
$(BUILD)/emu_test: $(BUILD)/emu_test.o $(BUILD)/obj/cuda_emu.o
	$(CXX) $^ -o $@ $(LDLIBS) -fsanitize=alignment
# gpt_train and bench/*.cu (a smoke test on tiny shapes, check.sh: --tiny) link impl_emu.o, as
# their nvcc builds link impl_cuda.o; linked without -fsanitize=thread: the emulator provides
# the hooks, no sanitizer runtime
$(BUILD)/gpt_train_emu.o: examples/gpt_train.cu $(HEADERS) $(EMU_HDRS) | $(BUILD)/obj
	$(CXX) $(EMU_FLAGS) -DMG_IMPLEMENTATION_ELSEWHERE -x c++ -c $< -o $@
$(addprefix $(BUILD)/,$(addsuffix _emu.o,$(GPUBENCH))): $(BUILD)/%_emu.o: bench/%.cu $(HEADERS) $(EMU_HDRS) | $(BUILD)/obj
	$(CXX) $(EMU_FLAGS) -DMG_IMPLEMENTATION_ELSEWHERE -x c++ -c $< -o $@
$(addprefix $(BUILD)/,$(addsuffix _emu,gpt_train $(GPUTESTS) $(GPUBENCH))): $(BUILD)/%_emu: $(BUILD)/%_emu.o $(BUILD)/obj/impl_emu.o $(BUILD)/obj/cuda_emu.o
	$(CXX) $^ -o $@ $(LDLIBS) -fsanitize=alignment

# --- dependencies, oracle, tests -------------------------------------------------------------
deps:
	@sh tools/install-deps.sh
	@sh tools/install-hf.sh

# Regenerate the PyTorch reference files when PyTorch is installed (the C tests read them).
oracle:
	@if $(PYTHON) -c 'import torch' 2>/dev/null; then \
	  for f in tests/oracle/*.py; do [ -f "$$f" ] || continue; echo "oracle: $$f"; \
	    $(PYTHON) $$f tests/data || exit 1; done; \
	else echo "oracle: PyTorch not installed; using the committed reference files"; fi

test: deps
	@$(MAKE) --no-print-directory oracle
	@$(MAKE) --no-print-directory -j2 all asan
	@sh tests/run.sh

train: deps
	@$(MAKE) --no-print-directory -j2 cpu
	@sh tools/train-demo.sh

# The Llama-shaped demo (RMSNorm, SwiGLU, rope, grouped-query attention, untied output layer):
# tools/train-demo.sh with MODEL=llama; it needs only these two programs.
train-llama: deps
	@$(MAKE) --no-print-directory -j2 $(BUILD)/gpt_train $(BUILD)/mg_prepare
	@MODEL=llama sh tools/train-demo.sh

clean:
	rm -rf $(BUILD)

# One line per target, then the variables; make passes VAR=value to the scripts it runs
# (tools/train-demo.sh reads RANKS, TP, PP, ITERS, …; tests/run.sh reads ONLY).
help:
	@printf '%s\n' \
	'Targets (programs are found, not listed: tests/test_*.c, bench/*.c, tools/*.c, examples/*.cu):' \
	'  all                every program with cc, with nvcc where it is found, and the emulated' \
	'                     CUDA builds (cpu + cuda + emu)' \
	'  cpu                every program with cc: build/<name>' \
	'  cuda               every program with nvcc: build/<name>_cuda (GPU if present, else CPU)' \
	'  emu                gpt_train, tests/gpu and bench/*.cu through the CUDA emulator:' \
	'                     build/<name>_emu' \
	'                     (tests/cuda_emu/README.md; make test runs them)' \
	'  asan               every test with AddressSanitizer + UBSan: build/<name>_asan' \
	'  test               deps, oracle, all and asan, then tests/run.sh: the whole suite' \
	'  train              deps, cpu, then tools/train-demo.sh: a small GPT on data/, and a sample' \
	'  train-llama        deps, gpt_train, mg_prepare, then MODEL=llama tools/train-demo.sh: a' \
	'                     small Llama-shaped model on data/ (one process, 120 iterations), a sample' \
	'  deps               install what is missing (as root): tools/install-deps.sh, then' \
	'                     tools/install-hf.sh (transformers 4.44.2 into .venv/hf)' \
	'  oracle             regenerate the PyTorch reference files in tests/data (if torch imports)' \
	'  fuzz               libFuzzer harnesses of mg_data.h with clang: build/fuzz/<name>' \
	'                     (run them: sh tests/fuzz/run.sh [SECONDS] [NAMES])' \
	'  clean              remove build/' \
	'  help               this list' \
	'  build/<name>       one program with cc, e.g. build/gpt_train, build/test_cli' \
	'  build/<name>_cuda  one program with nvcc, e.g. build/gpt_train_cuda' \
	'  build/<name>_asan  one test with the sanitizers, e.g. build/test_cli_asan' \
	'' \
	'Variables (make VAR=value ...):' \
	'  CC=$(CC)  NVCC=$(NVCC)  CLANG=$(CLANG)  PYTHON=$(PYTHON)' \
	'  CFLAGS       compiler flags of the cc builds (default -O2 -g -march=native)' \
	'  MODEL        train: gpt (default) or llama (what train-llama sets)' \
	'  RANKS TP PP  train: MPI ranks (default 8, llama 1; 1: one process, no mpirun), tensor- and' \
	'               pipeline-parallel sizes (default 2 and 2; data parallel = RANKS/(TP*PP)),' \
	'               e.g. make train RANKS=4 TP=1 PP=2' \
	'  ITERS        train: iterations (default 200 with several ranks, 600 with one; llama 120)' \
	'  MB SAMPLE    train: micro-batch size (default 2 / 8), tokens sampled at the end (200 / 400)' \
	'  THREADS      train: OpenMP threads of the whole run, shared by the ranks (default 2)' \
	'  ONLY         test: run only the tests whose name contains it (also: ONLY=cli sh tests/run.sh)'

# --- fuzz harnesses for mg_data.h (clang libFuzzer; not part of `make test`) ---------------------
#   make fuzz && sh tests/fuzz/run.sh [SECONDS] [NAMES]
CLANG   ?= clang
FUZZERS := $(patsubst tests/fuzz/%.c,$(BUILD)/fuzz/%,$(wildcard tests/fuzz/fuzz_*.c))
.PHONY: fuzz
fuzz: $(FUZZERS)
$(BUILD)/fuzz/%: tests/fuzz/%.c tests/fuzz/fuzz_util.h $(HEADERS)
	@mkdir -p $(BUILD)/fuzz
	$(CLANG) -g -O1 -std=c11 -D_GNU_SOURCE $(WARN) -I. -fsanitize=fuzzer,address,undefined \
	  -fno-sanitize-recover=undefined $(BLAS_CFLAGS) $< -o $@ $(BLAS_LIBS) -lm
