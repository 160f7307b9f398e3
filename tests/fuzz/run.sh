#!/bin/sh
# tests/fuzz/run.sh [SECONDS] [HARNESS...] — builds the mg_data.h and mg_tokenizer.h fuzz harnesses with clang's
# libFuzzer (+ AddressSanitizer, UndefinedBehaviorSanitizer) and runs each for SECONDS
# (default 120), one after the other, from the repository root:
#     sh tests/fuzz/run.sh                 # all ten, 2 minutes each
#     sh tests/fuzz/run.sh 60 tokenizer_json tokenizer_regex
# (tokenizer_encode loads the real vocabularies: make deps, then build/test_tokenizer once)
#     sh tests/fuzz/run.sh 600 idx         # fuzz_idx for 10 minutes
# Seeds come from tests/data (tests/fuzz/seeds.py); the growing corpus stays in
# build/fuzz/corpus/NAME between runs, crashing inputs land in build/fuzz/artifacts/NAME/.
# Limits: 10 s per input (a hang), 512 MB per allocation, 2 GB resident.
# Exit status: nonzero if a harness found a failure (its input is printed).
set -e
secs=${1:-120}
[ $# -gt 0 ] && shift
names=${*:-"json safetensors idx llmc state tokenizer_json tokenizer_tiktoken tokenizer_spm tokenizer_regex tokenizer_encode"}
CLANG=${CLANG:-clang}
PY=${PYTHON:-python3}
out=build/fuzz
mkdir -p "$out"
"$PY" tests/fuzz/seeds.py "$out/seeds"
# scratch files of the harnesses (libFuzzer's _exit skips their own clean-up)
MG_FUZZ_TMP=$(mktemp -d "${TMPDIR:-/tmp}/mg_fuzz_run.XXXXXX"); export MG_FUZZ_TMP
trap 'rm -rf "$MG_FUZZ_TMP"' EXIT
status=0
for n in $names; do
    src=tests/fuzz/fuzz_$n.c
    [ -f "$src" ] || { echo "no harness $src" >&2; exit 2; }
    # fuzz_state compiles megatron.h whole (one rank, no MPI): OpenBLAS and OpenMP; clang's
    # "loop not vectorized" remarks on its omp simd loops under the sanitizers are no errors
    [ "$n" = state ] && whole="-fopenmp -Wno-pass-failed -I/usr/include/x86_64-linux-gnu/openblas-pthread -lopenblas" || whole=
    "$CLANG" -g -O1 -std=c11 -D_GNU_SOURCE -Wall -Wextra -Werror -I. \
        -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
        "$src" -o "$out/fuzz_$n" $whole -lm
    seeds=$out/seeds/$n
    [ "$n" = safetensors ] || [ "$n" = json ] || [ "$n" = state ] && dict=-dict=tests/fuzz/safetensors.dict || dict=
    mkdir -p "$out/corpus/$n" "$out/artifacts/$n"
    echo "== fuzz_$n: $secs s"
    if ! "$out/fuzz_$n" -max_total_time="$secs" -timeout=10 -malloc_limit_mb=512 \
            -rss_limit_mb=2048 -max_len=16384 -print_final_stats=1 $dict \
            -artifact_prefix="$out/artifacts/$n/" "$out/corpus/$n" "$seeds" \
            > "$out/fuzz_$n.log" 2>&1; then
        status=1
        tail -n 40 "$out/fuzz_$n.log"
    fi
    grep -E "^(stat::number_of_executed_units|stat::new_units_added|#[0-9]+ *DONE)" \
        "$out/fuzz_$n.log" || true
    grep -E "cov: [0-9]+" "$out/fuzz_$n.log" | tail -n 1 || true
done
exit $status
