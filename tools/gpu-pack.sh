#!/bin/sh
# tools/gpu-pack.sh — build what a session on a lent GPU machine runs, and pack it.
#
#   sh tools/gpu-pack.sh            then carry build/gpu-pack.tar.xz to the GPU machine and run
#                                   sh tools/gpu-run.sh there (docs/cuda.md, "Run on a lent GPU")
#
# The GPU machine has the CUDA libraries but neither MPI nor OpenBLAS, and no time to spare for
# compiling: the programs are built here by nvcc for sm_90 only (H100, H200) and without MPI
# (one rank), into build-gpu/, then packed with the shared libraries they need that the CUDA
# toolkit does not bring (OpenBLAS and its Fortran runtime, libgomp, zlib), xz-compressed to
# stay well under the device tool's 64 MiB for carried files.
#   PROGS    the programs (default below: tests/gpu, the CPU tests that run with
#            MG_DEVICE=cuda, the trainer and bench/gpu)
#   NVARCH   nvcc's -gencode flags (default: sm_90 only)
set -e
cd "$(dirname "$0")/.."
B=build-gpu
PROGS=${PROGS:-"gpu_ops gpu_model test_ops test_ops_numerics test_ops_dtypes test_flash \
test_model test_llama test_mixed test_train test_recompute gpt_train gpu"}
NVARCH=${NVARCH:-"-gencode arch=compute_90,code=sm_90"}
targets=""
for p in $PROGS; do targets="$targets $B/${p}_cuda"; done
make --no-print-directory -j2 BUILD=$B NVARCH="$NVARCH" MPI_LIBS= MPI_CFLAGS= MPI_DEF= $targets
rm -rf $B/pack && mkdir -p $B/pack/bin $B/pack/lib
for p in $PROGS; do cp $B/${p}_cuda $B/pack/bin/; done
# every shared library the programs load, but the CUDA ones and the C/C++ runtime the
# machine has: OpenBLAS, gfortran, quadmath, gomp, zlib
for p in $PROGS; do ldd $B/${p}_cuda; done | awk '$3 ~ /^\// {print $3}' | sort -u |
  grep -E 'libopenblas|libgfortran|libquadmath|libgomp|libz\.' | while read -r lib; do
    cp -L "$lib" $B/pack/lib/
  done
tar -C $B/pack -cJf build/gpu-pack.tar.xz bin lib
echo "tools/gpu-pack.sh: build/gpu-pack.tar.xz ($(du -k build/gpu-pack.tar.xz | cut -f1) KiB):" \
     "$(ls $B/pack/bin | wc -l) programs, $(ls $B/pack/lib | tr '\n' ' ')"
