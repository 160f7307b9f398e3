#!/bin/sh
# tools/train-demo.sh — what `make train` runs after building: turns the small corpus shipped in
# data/ into a byte-level indexed dataset (build/mg_prepare), trains a small GPT on it for a few
# minutes (the training loss falls from ln 256 = 5.5; the validation loss on the held-out
# paragraphs is printed every 50 iterations), saves a checkpoint, prints a generated sample and
# draws the training curves (log.svg beside log.jsonl: loss, learning rate, grad norm, tokens/s).
# Everything it writes lives in build/demo/ (removed and rebuilt each run).
#
# The run is parallel, PTD-P style, on CPU ranks under mpirun: by default 8 ranks, the full
# 3-D layout = tensor-parallel t=2 (sequence parallel) x pipeline-parallel p=2 (1F1B, 3 layers
# per stage) x data-parallel d=2 (the distributed optimizer shards the AdamW moments over the
# 2 replicas). The log's first lines show which rank holds which (tensor, data, pipeline)
# coordinates. The math is the single-rank run's (tests/test_dp.c). The sample at the end is
# generated through the same layout (token by token through the pipeline stages).
#   RANKS=1 sh tools/train-demo.sh                        one process, no MPI layout
#   RANKS=4 TP=1 PP=2 sh tools/train-demo.sh              p=2 x d=2 on 4 ranks
#   RANKS=4 TP=2 PP=1 sh tools/train-demo.sh              t=2 (sequence parallel) x d=2
#   ITERS=600 sh tools/train-demo.sh                      the 3-D layout, a longer run
#
# MODEL=llama (what `make train-llama` runs) trains a small Llama-shaped model instead on the
# same corpus, by default in ONE process for 120 iterations and a 200-byte sample (about 90 s
# on a busy 2-core machine; 8 oversubscribed ranks take several minutes there): 6 layers,
# hidden 192, 6 query heads sharing 2 key/value groups (grouped-query attention; with TP=2
# each tensor-parallel rank holds one group and its 3 query heads), RMSNorm, a SwiGLU MLP
# (width 512, Megatron-LM's default int(4h·2/3/64)·64), rotary positions (no position
# table), an untied output layer, no biases: 2.46 M parameters (docs/llama.md). Its files go
# to build/demo-llama/.
#   MODEL=llama sh tools/train-demo.sh                    the Llama demo, one process
#   MODEL=llama RANKS=8 sh tools/train-demo.sh            the Llama demo on t=2 x p=2 x d=2
set -e
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
MODEL=${MODEL:-gpt}
if [ "$MODEL" = llama ]; then RANKS=${RANKS:-1}; ITERS=${ITERS:-120}; SAMPLE=${SAMPLE:-200}; fi
RANKS=${RANKS:-8}
TP=${TP:-2}
PP=${PP:-2}
THREADS=${THREADS:-2}
# 8 ranks on 2 cores (t=2 x p=2 x d=2) run ~0.3 s per iteration (communication and
# oversubscription; one rank with 2 threads is faster here — the layout is the point): a shorter
# default run in parallel (micro-batches of 2: 4 per replica and iteration keep the pipeline busy)
if [ "$RANKS" -gt 1 ]; then ITERS=${ITERS:-200}; SAMPLE=${SAMPLE:-200}; MB=${MB:-2}; fi
ITERS=${ITERS:-600}
# warm-up: 50 iterations (both defaults), or a tenth of a run of 100 or fewer (it must end
# before the decay does: ITERS=20 would fail on --lr-warmup-iters 50)
WARMUP=$(( ITERS > 100 ? 50 : ITERS / 10 ))
SAMPLE=${SAMPLE:-400}
MB=${MB:-8}
case $MODEL in
  gpt)
    OUT=$BUILD/demo
    ARCH="--num-layers 6 --hidden-size 192 --num-attention-heads 6"
    ABOUT="a 6-layer GPT (hidden 192, 6 heads, 2.7 M parameters)" ;;
  llama)
    OUT=$BUILD/demo-llama
    ARCH="--num-layers 6 --hidden-size 192 --num-attention-heads 6 --group-query-attention"
    ARCH="$ARCH --num-query-groups 2 --normalization RMSNorm --swiglu"
    ARCH="$ARCH --position-embedding-type rope --untie-embeddings-and-output-weights"
    ARCH="$ARCH --disable-bias-linear"
    ABOUT="a 6-layer Llama-shaped model (hidden 192, 6 query heads in 2 key/value groups,
train-demo: RMSNorm, SwiGLU 512, rope, untied output layer, no biases; 2.5 M parameters)" ;;
  *) echo "train-demo: MODEL=$MODEL: must be gpt or llama" >&2; exit 1 ;;
esac
for prog in mg_prepare gpt_train; do
  [ -x "$BUILD/$prog" ] || { echo "train-demo: $BUILD/$prog is missing (run make cpu)" >&2; exit 1; }
done
rm -rf "$OUT"
mkdir -p "$OUT"
"$BUILD/mg_prepare" --documents paragraph -o "$OUT/corpus" data/*.txt
if [ "$RANKS" -gt 1 ]; then
  LAUNCH="mpirun --oversubscribe --bind-to none -np $RANKS"
  [ "$(id -u)" = 0 ] && LAUNCH="$LAUNCH --allow-run-as-root"
  PAR="--tensor-model-parallel-size $TP --pipeline-model-parallel-size $PP"
  PAR="$PAR --use-distributed-optimizer"
  [ "$TP" -gt 1 ] && PAR="$PAR --sequence-parallel"
  # the ranks share the cores: one OpenMP thread each (at least one)
  THREADS=$(( THREADS / RANKS > 0 ? THREADS / RANKS : 1 ))
  echo "train-demo: $RANKS CPU ranks = tensor-parallel t=$TP x pipeline-parallel p=$PP x" \
       "data-parallel d=$((RANKS / (TP * PP))) (distributed optimizer)"
else
  LAUNCH=""
  PAR=""
fi
echo "train-demo: $ABOUT, byte vocabulary,"
echo "train-demo: $ITERS iterations of 16 sequences x 128 bytes, $THREADS thread(s) per rank"
# PASSIVE: idle OpenMP workers sleep instead of spinning while OpenBLAS's own (pthreads) threads
# run the GEMMs; on a busy 2-core machine spinning workers slow the run several times.
OMP_NUM_THREADS=$THREADS OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-PASSIVE} \
OMPI_MCA_btl_vader_single_copy_mechanism=none $LAUNCH "$BUILD/gpt_train" \
  --data-path "$OUT/corpus" --split 95,5,0 --vocab-size 256 \
  $ARCH --seq-length 128 \
  --micro-batch-size "$MB" --global-batch-size 16 --train-iters "$ITERS" \
  --lr 2e-3 --min-lr 2e-4 --lr-decay-style cosine --lr-warmup-iters "$WARMUP" \
  --weight-decay 0.1 --adam-beta2 0.95 --clip-grad 1.0 \
  --log-interval 10 --eval-interval 50 --eval-iters 2 \
  --save "$OUT/checkpoints" --log-jsonl "$OUT/log.jsonl" \
  --device cpu --sample-tokens "$SAMPLE" $PAR
echo "train-demo: checkpoint in $OUT/checkpoints, log in $OUT/log.jsonl, training curves in $OUT/log.svg (open it in a browser)"
