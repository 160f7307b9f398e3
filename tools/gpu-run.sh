#!/bin/bash
# tools/gpu-run.sh — the checks and measurements of a session on a lent GPU machine, in one run.
#
#   sh tools/gpu-pack.sh                      here: build and pack (build/gpu-pack.tar.xz)
#   bash tools/gpu-run.sh                     there, from the repository root, with the pack
#
# Unpacks build/gpu-pack.tar.xz into build-gpu/run, finds the CUDA libraries (cuBLAS, cuBLASLt,
# NCCL, the runtime) under /usr and /opt, then within DEADLINE seconds (default 420):
#   1. tests/gpu: gpu_ops_cuda and gpu_model_cuda, every kernel against its CPU twin;
#   2. the CPU tests with MG_DEVICE=cuda (ops, numerics, dtypes, tiled attention, the GPT and
#      Llama models, mixed precision, training and recomputation: their bit-identity checks
#      need the deterministic embedding backward);
#   3. bench/gpu --steps 3: per-kernel time against the roofline, whole-step MFU;
#   4. compute-sanitizer memcheck over gpu_ops_cuda, then an ncu per-kernel profile of one
#      GPT-2 step (times, then shared-memory wavefronts and bank conflicts), each only if the
#      time left allows it.
# One summary line per program on stdout; every log under $OUT/gpu-logs (the device tool's
# $OUT, else /tmp). Exit status 0 once everything that ran has been reported.
#   DEADLINE  seconds for the whole run      TESTS   the MG_DEVICE=cuda tests (names)
#   BENCHARGS extra arguments of bench/gpu   NONCU / NOSAN  skip ncu / compute-sanitizer
cd "$(dirname "$0")/.." || exit 1
T0=$(date +%s)
DEADLINE=${DEADLINE:-420}
LOG=${OUT:-/tmp}/gpu-logs
R=build-gpu/run
mkdir -p "$LOG" $R
tar -C $R -xJf build/gpu-pack.tar.xz || { echo "gpu-run: no build/gpu-pack.tar.xz (run tools/gpu-pack.sh here first and carry it)"; exit 1; }
L=""
for n in libcublasLt.so.13 libcublas.so.13 libnccl.so.2 libcudart.so.13; do
  f=$(find /usr /opt -name "$n" 2>/dev/null | head -1)
  [ -n "$f" ] && L="$L:$(dirname "$f")"
done
export LD_LIBRARY_PATH=$PWD/$R/lib$L${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export OMP_WAIT_POLICY=passive
left() { echo $((DEADLINE - ($(date +%s) - T0))); }
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null | sed 's/^/# gpu: /'

run_one() {   # name, timeout, command…: one summary line, the first failures
  local name=$1 t=$2; shift 2
  if [ "$(left)" -lt "$t" ]; then echo "== $name: skipped ($(left) s left)"; return; fi
  timeout "$t" "$@" > "$LOG/$name.log" 2>&1
  echo "== $name: exit $? · $(grep -E 'passed, [0-9]+ failed' "$LOG/$name.log" | tail -1)"
  grep '^not ok' "$LOG/$name.log" | cut -c1-200 | head -10
}
for p in gpu_ops gpu_model; do run_one "$p" 150 $R/bin/${p}_cuda; done
for t in ${TESTS:-test_ops test_ops_numerics test_ops_dtypes test_flash test_model test_llama test_mixed test_train test_recompute}; do
  [ -x $R/bin/${t}_cuda ] && MG_DEVICE=cuda run_one "$t" 90 $R/bin/${t}_cuda
done
if [ "$(left)" -gt 120 ]; then
  echo "== bench/gpu ($(left) s left)"
  timeout 150 $R/bin/gpu_cuda --steps 3 ${BENCHARGS} > "$LOG/bench.log" 2>&1
  echo "exit $?"; cat "$LOG/bench.log"
fi
SAN=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null | head -1)
if [ -z "$NOSAN" ] && [ -n "$SAN" ] && [ "$(left)" -gt 90 ]; then
  echo "== compute-sanitizer memcheck gpu_ops_cuda ($(left) s left)"
  timeout $(($(left) - 60)) "$SAN" --tool memcheck --print-limit 20 $R/bin/gpu_ops_cuda > "$LOG/memcheck.log" 2>&1
  echo "exit $?"; grep -E 'ERROR SUMMARY|Invalid' "$LOG/memcheck.log" | head -12
fi
NCU=$(command -v ncu || ls /usr/local/cuda/bin/ncu 2>/dev/null | head -1)
if [ -z "$NONCU" ] && [ -n "$NCU" ] && [ "$(left)" -gt 70 ]; then
  echo "== ncu, one GPT-2 step, per kernel ($(left) s left): $LOG/ncu_gpt2.csv"
  timeout $(($(left) - 30)) "$NCU" --metrics gpu__time_duration.sum --print-summary per-kernel \
    --csv $R/bin/gpu_cuda --no-kernels --model gpt2 --steps 1 > "$LOG/ncu_gpt2.csv" 2> "$LOG/ncu_gpt2.err"
  echo "exit $?"
fi
# The device's shared-memory wavefronts and bank conflicts per kernel, beside the emulator's
# bank model (MG_EMU_BANKS=1, tests/cuda_emu/README.md), which counts every kernel conflict free.
if [ -z "$NONCU" ] && [ -n "$NCU" ] && [ "$(left)" -gt 60 ]; then
  echo "== ncu, shared-memory wavefronts and bank conflicts of one GPT-2 step ($(left) s left): $LOG/ncu_banks.csv"
  timeout $(($(left) - 20)) "$NCU" --print-summary per-kernel --csv --metrics \
l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum,l1tex__data_pipe_lsu_wavefronts_mem_shared_op_st.sum,\
l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum,l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum \
    $R/bin/gpu_cuda --no-kernels --model gpt2 --steps 1 > "$LOG/ncu_banks.csv" 2> "$LOG/ncu_banks.err"
  echo "exit $?"
fi
echo "gpu-run: $(($(date +%s) - T0)) s; logs in $LOG"
