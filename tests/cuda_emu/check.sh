#!/bin/sh
# tests/cuda_emu/check.sh — the library's CUDA path run through the CUDA emulator (build/*_emu,
# built by `make emu`); tests/run.sh runs it and counts its "ok"/"not ok" lines.
#   1. emu_test: the emulator itself, and its bug finders on deliberately broken kernels
#   2. gpu_ops_emu: every op on the "cuda" device (the emulator) against the CPU backend, with
#      threads in order and again in a shuffled order (MG_EMU_SHUFFLE); the in-order run with
#      the shared-memory bank model (MG_EMU_BANKS=1): no bank conflict at any access site
#   3. gpu_model_emu: the whole model, fp32/bf16/fp16, against the CPU backend
#   4. gpt_train_emu --device cuda against the CPU build's gpt_train on a tiny model: 1 rank
#      fp32 and bf16, 2 ranks with t=2, d=2 (fp32 and bf16), p=2 and c=2 (fp32, bf16, and a Llama
#      with GQA, rope and attention dropout). Bounds: fp32 relative 1e-5 per logged loss;
#      bf16 2^-7 nats (2u, the bound tests/test_mixed.c holds bf16 to against fp32); 1 rank fp16
#      with dynamic loss scaling whose first iterations overflow (skipped: "lm loss: NAN" on both),
#      2^-9 nats (an fp16 ulp at the loss's magnitude), and the same with --enable-cuda-graph on
#      the emulated device (the optimizer step captured and replayed) against the plain CPU run;
#      the loss mask (--eod-mask-loss) at 1 rank fp16 with the graph, and at p=2 per token
#   5. the timers of --timing-log-level 2 on the GPU path (CUDA events) add up: 4 ranks, and 1
#      rank with more timed regions than a timer's pool of event pairs
#   6. bench/gpu.cu (build/gpu_emu --tiny): the GPU benchmark runs start to end on tiny shapes
#   7. every __global__ function of the library headers was launched by 2-6
# Every emulated run aborts on its first bug-finder report (race, bounds, uninitialised read,
# a typed access at an address its type's alignment does not divide).
cd "$(dirname "$0")/../.." || exit 1
BUILD=${BUILD:-build}
MPIRUN=${MPIRUN:-mpirun --oversubscribe --bind-to none}
[ "$(id -u)" = 0 ] && case "$MPIRUN" in *allow-run-as-root*) ;; *) MPIRUN="$MPIRUN --allow-run-as-root" ;; esac
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
export MG_EMU_LAUNCH_LOG="$tmp/launched"
failed=0

report() { # report OK NAME [DETAIL]
  if [ "$1" = 0 ]; then echo "ok - $2"; else echo "not ok - $2${3:+: $3}"; failed=$((failed + 1)); fi
}
# run NAME OUTFILE COMMAND… : the command's own ok/not-ok lines are summed into one line
run_prog() {
  name=$1; out=$2; shift 2
  start=$(date +%s)
  "$@" > "$out" 2>&1; rc=$?
  p=$(grep -c '^ok ' "$out"); f=$(grep -c '^not ok ' "$out")
  if [ "$rc" = 0 ] && [ "$f" = 0 ] && [ "$p" -gt 0 ]; then
    report 0 "$name ($p checks, $(( $(date +%s) - start ))s)"
  else
    report 1 "$name" "exit status $rc, $f of $((p + f)) checks failed"
    grep -E '^not ok |mg-emu' "$out" | head -n 12 | sed 's/^/  | /'
  fi
}
for p in emu_test gpu_ops_emu gpu_model_emu gpt_train_emu gpt_train gpu_emu; do
  [ -x "$BUILD/$p" ] || { report 1 "cuda_emu: $BUILD/$p is built" "make $BUILD/$p"; exit 1; }
done

run_prog "cuda_emu: emulator self-test and bug finders (emu_test)" "$tmp/emu_test" "$BUILD/emu_test"
"$BUILD/emu_test" --misaligned > "$tmp/misaligned" 2>&1; rc=$?
report "$([ "$rc" != 0 ] && grep -q 'misaligned address' "$tmp/misaligned" && echo 0 || echo 1)" \
  "cuda_emu: a misaligned 16-byte vector load stops the emulated program (-fsanitize=alignment), as it faults on a GPU" \
  "exit status $rc: $(head -c 200 "$tmp/misaligned")"
run_prog "cuda_emu: gpu_ops_emu, every op on the emulated device vs the CPU backend" "$tmp/ops" \
  env MG_DEVICE=cuda MG_EMU_BANKS=1 "$BUILD/gpu_ops_emu"
# The bank model's table of that run: no bank conflict at any access site whose lanes ran it
# equally often (sites a warp's lanes ran unequal numbers of times are paired approximately).
kernels=$(grep -c '^mg-emu:   [^ ]' "$tmp/ops")
requests=$(awk '/^mg-emu:   [^ ]/ { n += $3 } END { print n + 0 }' "$tmp/ops")
fa=$(awk '/^mg-emu:   mg__k_fa_/ { r += $3; w += $5; i += $7 } END { printf "%d requests, %d wavefronts, ideal %d", r, w, i }' "$tmp/ops")
uneven=$(grep '^mg-emu:     ' "$tmp/ops" | grep -c 'uneven')
conflicts=$(grep '^mg-emu:     ' "$tmp/ops" | grep -v 'uneven')
report "$([ "$kernels" -gt 20 ] && [ -z "$conflicts" ] && echo 0 || echo 1)" \
  "cuda_emu: shared-memory bank model over that run: no bank conflict at any access site of the $kernels kernel instantiations with shared memory ($requests warp-wide requests; the tensor-core attention kernels $fa; $uneven sites run unevenly by a warp's lanes, approximate, left out)" \
  "$(echo "$conflicts" | head -n 5)"
run_prog "cuda_emu: gpu_ops_emu with threads of each block in shuffled order" "$tmp/ops_shuf" \
  env MG_DEVICE=cuda MG_EMU_SHUFFLE=7 "$BUILD/gpu_ops_emu"
run_prog "cuda_emu: gpu_model_emu, the model in fp32/bf16/fp16 vs the CPU backend" "$tmp/model" \
  env MG_DEVICE=cuda "$BUILD/gpu_model_emu"

# --- gpt_train_emu against gpt_train ----------------------------------------------------------
ARGS="--data-path tests/data/gpt_tokens.bin --vocab-size 37 --num-layers 2 --hidden-size 32
  --num-attention-heads 4 --seq-length 16 --micro-batch-size 2 --global-batch-size 4
  --train-iters 3 --lr 1e-3 --split 1,0,0 --eval-iters 0 --log-interval 1"
losses() { grep -o 'lm loss: [-0-9.eE+]*' "$1" | awk '{print $3}'; }
train_case() { # train_case NAME RANKS MODE(rel|abs) TOL EXTRA-FLAGS [EMU-ONLY-FLAGS]
  name=$1; np=$2; mode=$3; tol=$4; extra=$5; emu_extra=${6:-}
  if [ "$np" = 1 ]; then launch=""; else launch="$MPIRUN -np $np"; fi
  start=$(date +%s)
  # shellcheck disable=SC2086
  $launch "$BUILD/gpt_train" $ARGS $extra --device cpu > "$tmp/cpu" 2>&1; rc1=$?
  # shellcheck disable=SC2086
  $launch "$BUILD/gpt_train_emu" $ARGS $extra $emu_extra --device cuda > "$tmp/emu" 2>&1; rc2=$?
  losses "$tmp/cpu" > "$tmp/l_cpu"; losses "$tmp/emu" > "$tmp/l_emu"
  worst=$(paste "$tmp/l_cpu" "$tmp/l_emu" | awk -v mode="$mode" '
    { n++; d = $1 - $2; if (d < 0) d = -d; if (mode == "rel") d /= ($1 < 0 ? -$1 : $1); if (d > w) w = d }
    END { if (n == 3 && NF == 2) printf "%.3g", w; else print "missing" }')
  ok=1
  [ "$rc1" = 0 ] && [ "$rc2" = 0 ] && [ "$worst" != missing ] &&
    awk -v w="$worst" -v t="$tol" 'BEGIN { exit !(w <= t) }' && ok=0
  report $ok "cuda_emu: gpt_train_emu $name equals gpt_train's losses (worst $mode diff $worst, tol $tol, $(( $(date +%s) - start ))s)" \
    "exit status cpu $rc1, emu $rc2; losses cpu [$(tr '\n' ' ' < "$tmp/l_cpu")] emu [$(tr '\n' ' ' < "$tmp/l_emu")]"
  [ $ok = 0 ] || grep -E 'mg-emu|rror' "$tmp/emu" | head -n 8 | sed 's/^/  | /'
}
train_case "1 rank fp32" 1 rel 1e-5 ""
train_case "1 rank bf16" 1 abs 0.0078125 "--bf16"
train_case "1 rank fp16 dynamic loss scale (iterations 1-2 overflow, skipped)" 1 abs 0.001953125 \
  "--fp16 --initial-loss-scale 4194304 --hysteresis 1 --loss-scale-window 3 --clip-grad 0.5"
train_case "1 rank fp16 dynamic loss scale, optimizer step as a CUDA graph" 1 abs 0.001953125 \
  "--fp16 --initial-loss-scale 4194304 --hysteresis 1 --loss-scale-window 3 --clip-grad 0.5" \
  "--enable-cuda-graph"
train_case "2 ranks t=2 fp32" 2 rel 1e-5 "--tensor-model-parallel-size 2"
train_case "2 ranks d=2 fp32" 2 rel 1e-5 ""
train_case "2 ranks d=2 bf16" 2 abs 0.0078125 "--bf16"
train_case "2 ranks d=2 bf16 distributed optimizer (sharded master, fused step writes the bf16 copy)" \
  2 abs 0.0078125 "--bf16 --use-distributed-optimizer"
train_case "2 ranks p=2 fp32 (NCCL send/recv)" 2 rel 1e-5 "--pipeline-model-parallel-size 2"
train_case "2 ranks c=2 fp32 (ring attention: tiled kernels, NCCL send/recv)" 2 rel 1e-5 \
  "--context-parallel-size 2"
train_case "2 ranks c=2 bf16" 2 abs 0.0078125 "--context-parallel-size 2 --bf16"
train_case "2 ranks c=2 fp32 GQA, rope, attention dropout" 2 rel 1e-5 \
  "--context-parallel-size 2 --group-query-attention --num-query-groups 2
   --position-embedding-type rope --normalization RMSNorm --swiglu --ffn-hidden-size 48
   --attention-dropout 0.1"
train_case "1 rank fp16 loss mask (--eod-mask-loss: ignored rows, per-microbatch factors, the kept count on the device), optimizer step as a CUDA graph" \
  1 abs 0.001953125 "--fp16 --initial-loss-scale 4194304 --hysteresis 1 --loss-scale-window 3
   --clip-grad 0.5 --eod-mask-loss --eod-token-id 7" "--enable-cuda-graph"
train_case "2 ranks p=2 fp32 loss mask, per-token (the kept count broadcast from the last stage)" \
  2 rel 1e-5 "--pipeline-model-parallel-size 2 --eod-mask-loss --eod-token-id 7
   --calculate-per-token-loss"

# --- the timers on the GPU path: CUDA events on the compute and communication streams ---------
# 4 ranks, p=2 x d=2 with the distributed optimizer, every timer of --timing-log-level 2, each
# rank's times printed (--timing-log-option all). Per logged iteration: rank 0's
# forward-backward + optimizer within [0.9, 1.001] of its iteration time (what runs outside
# both is the step's bookkeeping: microseconds); on every rank the computes within
# forward-backward and the optimizer's parts within optimizer; every communication timer
# (pipeline send/recv, embedding all-reduce, gradient reduce-scatter, parameter all-gather)
# measured on every rank that runs it. The log prints each timer to 0.01 ms and the iteration
# time to 0.1 ms, so every bound also allows half a printed unit per term it adds or compares
# (three optimizer parts of about 5 ms each, rounded up, can exceed 1.001x their parent by that
# alone).
start=$(date +%s)
# shellcheck disable=SC2086
$MPIRUN -np 4 "$BUILD/gpt_train_emu" $ARGS --global-batch-size 8 --device cuda \
  --pipeline-model-parallel-size 2 --use-distributed-optimizer --timing-log-level 2 \
  --timing-log-option all > "$tmp/timing" 2>&1; rc=$?
verdict=$(awk '
  function check(   r, fb, opt, parts, ratio) {
    if (it_ms == "") return
    n_it++
    ratio = (t["forward-backward", 0] + t["optimizer", 0]) / it_ms
    if (worst == "" || (ratio < 1 ? 1 - ratio : ratio - 1) > (worst < 1 ? 1 - worst : worst - 1)) worst = ratio
    if (!(ratio >= 0.9 && t["forward-backward", 0] + t["optimizer", 0] <= it_ms * 1.001 + 0.06))
      bad = bad " ratio " ratio " at iteration " n_it
    for (r = 0; r < 4; r++) {
      fb = t["forward-backward", r]; opt = t["optimizer", r]
      if (t["forward-compute", r] + t["backward-compute", r] > fb * 1.001 + 0.015 || fb <= 0)
        bad = bad " rank " r ": computes > forward-backward"
      parts = t["optimizer-clip-main-grad", r] + t["optimizer-inner-step", r] + t["params-all-gather", r]
      if (parts > opt * 1.001 + 0.02 || opt <= 0) bad = bad " rank " r ": parts > optimizer"
      if (!(t["embedding-grads-all-reduce", r] > 0 && t["all-grads-sync", r] > 0 && t["params-all-gather", r] > 0))
        bad = bad " rank " r ": a collective timer is missing"
    }
    if (!(t["forward-send", 0] > 0 && t["forward-recv", 2] > 0 && t["backward-send", 2] > 0 && t["backward-recv", 0] > 0))
      bad = bad " a pipeline send/recv timer is missing"
    delete t
  }
  /iteration +[0-9]+\/.*elapsed time per iteration \(ms\):/ {
    check(); s = $0; sub(/.*elapsed time per iteration \(ms\): /, "", s); it_ms = s + 0
  }
  /^  [a-z-]+:$/ { name = $1; sub(/:$/, "", name) }
  /^     rank +[0-9]+: / { r = $2; sub(/:$/, "", r); t[name, r + 0] = $3 + 0 }
  END {
    check()
    if (n_it != 3) bad = bad " " n_it " logged iterations"
    printf "%s|%s\n", worst, bad
  }' "$tmp/timing")
ok=1; [ "$rc" = 0 ] && [ -z "${verdict#*|}" ] && ok=0
report $ok "cuda_emu: gpt_train_emu 4 ranks p=2 d=2 --timing-log-level 2: the CUDA-event timers add up (rank 0 forward-backward + optimizer / iteration time: worst ${verdict%%|*}, in [0.9, 1.001] up to the log's rounding; computes and optimizer parts within their parents, every communication timer measured, $(( $(date +%s) - start ))s)" \
  "exit status $rc;${verdict#*|}"
[ $ok = 0 ] || grep -E 'mg-emu|rror' "$tmp/timing" | head -n 8 | sed 's/^/  | /'

# One rank, 40 microbatches of a tiny model: 40 forward and 40 backward regions in one log
# interval, more than a timer's pool of 32 event pairs, so each compute timer resolves its
# older half mid-iteration. forward-compute + backward-compute must stay within [0.9, 1.001]
# of forward-backward (16 lost pairs of 40 would leave about 0.6), and forward-backward + optimizer
# within [0.9, 1.001] of the iteration time (each upper bound plus the printed values' rounding,
# as above).
start=$(date +%s)
"$BUILD/gpt_train_emu" --device cuda --data-path tests/data/gpt_tokens.bin --vocab-size 37 \
  --num-layers 1 --hidden-size 16 --num-attention-heads 2 --seq-length 4 --micro-batch-size 1 \
  --global-batch-size 40 --train-iters 1 --lr 1e-3 --split 1,0,0 --eval-iters 0 \
  --timing-log-level 2 --timing-log-option max > "$tmp/pool" 2>&1; rc=$?
verdict=$(awk '
  /elapsed time per iteration \(ms\):/ { s = $0; sub(/.*elapsed time per iteration \(ms\): /, "", s); it = s + 0 }
  /^    [a-z-]+ \.+: / { t[$1] = $NF + 0 }
  END {
    c = (t["forward-compute"] + t["backward-compute"]) / (t["forward-backward"] > 0 ? t["forward-backward"] : 1)
    i = (t["forward-backward"] + t["optimizer"]) / (it > 0 ? it : 1)
    ok = c >= 0.9 && t["forward-compute"] + t["backward-compute"] <= t["forward-backward"] * 1.001 + 0.015 &&
         i >= 0.9 && t["forward-backward"] + t["optimizer"] <= it * 1.001 + 0.06
    printf "%.5f %.5f %d\n", c, i, ok
  }' "$tmp/pool")
set -- $verdict
ok=1; [ "$rc" = 0 ] && [ "$3" = 1 ] && ok=0
report $ok "cuda_emu: gpt_train_emu 1 rank, 40 microbatches (more timed regions than a timer's 32 event pairs): computes / forward-backward $1, forward-backward + optimizer / iteration $2, both in [0.9, 1.001] up to the log's rounding ($(( $(date +%s) - start ))s)" \
  "exit status $rc"
[ $ok = 0 ] || grep -E 'mg-emu|rror' "$tmp/pool" | head -n 8 | sed 's/^/  | /'

# --- bench/gpu on tiny shapes: its kernel table and both whole-step lines --------------------
start=$(date +%s)
"$BUILD/gpu_emu" --tiny > "$tmp/bench" 2>&1; rc=$?
rows=$(grep -c '^| ' "$tmp/bench")
report "$([ "$rc" = 0 ] && [ "$rows" = 30 ] && echo 0 || echo 1)" \
  "cuda_emu: bench/gpu --tiny runs (kernel table and whole steps, $rows table lines, $(( $(date +%s) - start ))s)" \
  "exit status $rc, $rows table lines of 30"
[ "$rc" = 0 ] || grep -E 'mg-emu|rror' "$tmp/bench" | head -n 8 | sed 's/^/  | /'

# --- every __global__ function of the library was launched ------------------------------------
kernels=$(sed -n 's/.*__global__.*[ *]\([A-Za-z_][A-Za-z0-9_]*\)(.*/\1/p' ./*.h | sort -u)
missing=""
for k in $kernels; do grep -qx "$k" "$tmp/launched" 2>/dev/null || missing="$missing $k"; done
report "$([ -z "$missing" ] && [ -n "$kernels" ] && echo 0 || echo 1)" \
  "cuda_emu: each of the $(echo $kernels | wc -w) __global__ functions of the library headers is launched by an emulated test" \
  "never launched:$missing"
exit $((failed != 0))
