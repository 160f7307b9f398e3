# megatron.h — build, test, train.
#   make           build every program with cc into build/ (and with nvcc, as build/<name>_cuda)
#   make test      install what is missing (as root), build all flavours, run the whole suite
#   make train     train a small GPT on the corpus shipped in data/ and print a sample
#
# Programs are discovered, never listed: tests/test_*.c, bench/*.c, tools/*.c, examples/*.cu.
# Tests, benches and tools link one implementation object per flavour (build/obj/impl_*.o:
# `#define MG_IMPLEMENTATION` + every header), so the kernels are compiled once per flavour.
# Examples include the implementation themselves, as a user's program does.

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
CFLAGS  ?= -O2 -g -march=x86-64-v2
CFLAGS  += -std=c11 -D_GNU_SOURCE $(WARN) -fopenmp -I. $(MPI_DEF) $(MPI_CFLAGS) $(BLAS_CFLAGS)
LDLIBS  := $(MPI_LIBS) $(BLAS_LIBS) -lm -fopenmp
SANFLAGS:= -fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer

CUDA_HOME ?= $(patsubst %/bin/nvcc,%,$(NVCC))
NVARCH  := -gencode arch=compute_80,code=sm_80 -gencode arch=compute_90,code=[sm_90,compute_90]
NVFLAGS := -O2 -std=c++17 $(NVARCH) -I. $(MPI_DEF) $(MPI_CFLAGS) $(BLAS_CFLAGS) \
           -Werror all-warnings -Xcompiler -Wall,-Wextra,-Werror,-fopenmp -diag-suppress 177
NVLIBS  := -lcublas -lnccl -lcudart $(MPI_LIBS) $(BLAS_LIBS) -lm -lgomp

HEADERS := $(wildcard *.h)
TESTHDRS:= $(wildcard tests/*.h) $(wildcard bench/*.h)
TESTS   := $(patsubst tests/%.c,%,$(wildcard tests/test_*.c))
BENCHES := $(patsubst bench/%.c,%,$(wildcard bench/*.c))
TOOLS   := $(patsubst tools/%.c,%,$(wildcard tools/*.c))
EXAMPLES:= $(patsubst examples/%.cu,%,$(wildcard examples/*.cu))
GPUTESTS:= $(patsubst tests/gpu/%.c,%,$(wildcard tests/gpu/*.c))
LINKED  := $(TESTS) $(BENCHES) $(TOOLS)

CPU_PROGS  := $(addprefix $(BUILD)/,$(LINKED) $(EXAMPLES))
ASAN_PROGS := $(addprefix $(BUILD)/,$(addsuffix _asan,$(TESTS)))
ifneq ($(NVCC),)
CUDA_PROGS := $(addprefix $(BUILD)/,$(addsuffix _cuda,$(LINKED) $(EXAMPLES) $(GPUTESTS)))
endif

.PHONY: all cpu cuda asan test deps oracle train clean
all: cpu cuda
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
	$(NVCC) $(NVFLAGS) -x cu -c $< -o $@
$(BUILD)/%_cuda.o: tests/gpu/%.c $(HEADERS) $(TESTHDRS) | $(BUILD)/obj
	$(NVCC) $(NVFLAGS) -x cu -c $< -o $@
$(BUILD)/%_cuda.o: bench/%.c $(HEADERS) $(TESTHDRS) | $(BUILD)/obj
	$(NVCC) $(NVFLAGS) -x cu -c $< -o $@
$(BUILD)/%_cuda.o: tools/%.c $(HEADERS) | $(BUILD)/obj
	$(NVCC) $(NVFLAGS) -x cu -c $< -o $@
$(addprefix $(BUILD)/,$(addsuffix _cuda,$(LINKED) $(GPUTESTS))): $(BUILD)/%_cuda: $(BUILD)/%_cuda.o $(BUILD)/obj/impl_cuda.o
	$(NVCC) $(NVARCH) $^ -o $@ $(NVLIBS)
$(addprefix $(BUILD)/,$(addsuffix _cuda,$(EXAMPLES))): $(BUILD)/%_cuda: examples/%.cu $(HEADERS) | $(BUILD)/obj
	$(NVCC) $(NVFLAGS) $< -o $@ $(NVLIBS)

# --- dependencies, oracle, tests -------------------------------------------------------------
deps:
	@sh tools/install-deps.sh

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

clean:
	rm -rf $(BUILD)

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
