#!/bin/sh
# bench/pipeline.sh — pipeline-parallel training on this machine's CPU, measured and predicted.
# For p = 2 and 4 ranks and every built-in schedule, trains a small GPT with gpt_train for a
# few iterations with --pipeline-trace (the last iteration's timeline), then build/pipeline
# prints each rank's measured idle fraction beside the simulator's prediction from the
# measured action costs (bench/pipeline.c says how). One OpenMP thread per rank: with p = 2
# on 2 cores every rank has its own core; with p = 4 ranks share cores, which the simulator
# does not model. Each configuration runs REPEAT times (default 3) and the least disturbed run
# (shortest measured iteration) is reported: the machine may be shared. Also draws the
# measured and simulated 1F1B timelines (p = 4) as SVG.
#   sh bench/pipeline.sh       (OUT=DIR keeps the traces there, SVG=DIR the pictures, REPEAT=N)
set -e
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/mg_bench_pipeline}
REPEAT=${REPEAT:-3}
SVG=${SVG:-bench}
mkdir -p "$OUT"
make --no-print-directory build/gpt_train build/pipeline build/pipeline_sim build/mg_prepare \
  > /dev/null
build/mg_prepare --documents paragraph -o "$OUT/corpus" data/*.txt > /dev/null
# Open MPI's default shared-memory transport (single copy through CMA) here: tests/run.sh
# turns it off for portability, at a cost of ~25% idle time in this bench.
export OMP_NUM_THREADS=1 OMP_WAIT_POLICY=passive
MPIRUN="mpirun --bind-to none"
[ "$(id -u)" = 0 ] && MPIRUN="$MPIRUN --allow-run-as-root"
CORES=$(getconf _NPROCESSORS_ONLN)
LAYERS=8
MODEL="--data-path $OUT/corpus --split 1,0,0 --vocab-size 256 --num-layers $LAYERS \
 --hidden-size 128 --num-attention-heads 4 --seq-length 128 --micro-batch-size 2 \
 --global-batch-size 16 --train-iters 4 --lr 1e-3 --eval-iters 0 --log-interval 100 --device cpu"
echo "model: $LAYERS layers, hidden 128, sequence 128, micro-batch 2, 8 microbatches per iteration"
echo "machine: $CORES cores, load average before the runs: $(cut -d' ' -f1-3 /proc/loadavg)"
for P in 2 4; do
  for S in gpipe 1f1b interleaved zb-h1; do
    EXTRA=""
    [ "$S" = interleaved ] && EXTRA="--num-layers-per-virtual-pipeline-stage $((LAYERS / (2 * P)))"
    T="$OUT/$S-p$P.trace"
    OVER=""; [ "$P" -gt "$CORES" ] && OVER="--oversubscribe"
    BEST=""
    for R in $(seq "$REPEAT"); do     # the least disturbed of REPEAT runs: shortest makespan
      $MPIRUN $OVER -np $P build/gpt_train $MODEL --pipeline-model-parallel-size $P \
        --pipeline-schedule $S $EXTRA --pipeline-trace "$T.$R" > "$OUT/$S-p$P.log"
      MS=$(build/pipeline "$T.$R" | sed -n 's/^makespan (ms): measured \([0-9.]*\),.*/\1/p')
      if [ -z "$BEST" ] || [ "$(echo "$MS < $BEST" | bc)" = 1 ]; then BEST=$MS; cp "$T.$R" "$T"; fi
    done
    echo
    echo "### $S, p = $P$( [ -n "$EXTRA" ] && echo ", v = 2")"
    build/pipeline "$T"
  done
done
build/pipeline_sim --trace "$OUT/1f1b-p4.trace" --svg "$SVG/pipeline_1f1b_p4_measured.svg" \
  --title "gpt_train, 1F1B, p=4, m=8: measured on 2 CPU cores" > /dev/null
build/pipeline "$OUT/1f1b-p4.trace" --svg-sim "$SVG/pipeline_1f1b_p4_simulated.svg" > /dev/null
echo
echo "pictures: $SVG/pipeline_1f1b_p4_measured.svg, $SVG/pipeline_1f1b_p4_simulated.svg"
