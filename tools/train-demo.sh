#!/bin/sh
# tools/train-demo.sh — what `make train` runs after building: turns the small corpus shipped in
# data/ into a byte-level indexed dataset (build/mg_prepare), trains a small GPT on it for a few
# minutes with 2 CPU threads (the training loss falls from ln 256 = 5.5; the validation loss on
# the held-out paragraphs is printed every 50 iterations), saves a checkpoint, and prints a
# generated sample. Everything it writes lives in build/demo/ (removed and rebuilt each run).
#   THREADS=4 ITERS=1200 sh tools/train-demo.sh     more threads, a longer run
set -e
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
THREADS=${THREADS:-2}
ITERS=${ITERS:-600}
OUT=$BUILD/demo
for prog in mg_prepare gpt_train; do
  [ -x "$BUILD/$prog" ] || { echo "train-demo: $BUILD/$prog is missing (run make cpu)" >&2; exit 1; }
done
rm -rf "$OUT"
mkdir -p "$OUT"
"$BUILD/mg_prepare" --documents paragraph -o "$OUT/corpus" data/*.txt
echo "train-demo: a 6-layer GPT (hidden 192, 6 heads, 2.7 M parameters), byte vocabulary,"
echo "train-demo: $ITERS iterations of 16 sequences x 128 bytes on $THREADS CPU threads"
# PASSIVE: idle OpenMP workers sleep instead of spinning while OpenBLAS's own (pthreads) threads
# run the GEMMs; on a busy 2-core machine spinning workers slow the run several times.
OMP_NUM_THREADS=$THREADS OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-PASSIVE} "$BUILD/gpt_train" \
  --data-path "$OUT/corpus" --split 95,5,0 --vocab-size 256 \
  --num-layers 6 --hidden-size 192 --num-attention-heads 6 --seq-length 128 \
  --micro-batch-size 8 --global-batch-size 16 --train-iters "$ITERS" \
  --lr 2e-3 --min-lr 2e-4 --lr-decay-style cosine --lr-warmup-iters 50 \
  --weight-decay 0.1 --adam-beta2 0.95 --clip-grad 1.0 \
  --log-interval 10 --eval-interval 50 --eval-iters 2 \
  --save "$OUT/checkpoints" --log-jsonl "$OUT/log.jsonl" \
  --device cpu --sample-tokens 400
echo "train-demo: checkpoint in $OUT/checkpoints, log in $OUT/log.jsonl"
