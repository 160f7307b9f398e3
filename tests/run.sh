#!/bin/sh
# tests/run.sh — runs every built test program in every flavour and rank count its spec line
# names, kills any that outlives its timeout, and folds the results into one closing line
# "N passed, N failed". A program's "ok"/"not ok" lines count one each; a program that crashes,
# times out or exits non-zero without reporting a failure counts one failure more.
cd "$(dirname "$0")/.." || exit 1
BUILD=${BUILD:-build}
export OMPI_MCA_btl_vader_single_copy_mechanism=none OMPI_MCA_rmaps_base_oversubscribe=1
# libgomp spins idle threads by default: on an oversubscribed machine that starves other ranks.
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=0} UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1}
MPIRUN="mpirun --oversubscribe --bind-to none"
[ "$(id -u)" = 0 ] && MPIRUN="$MPIRUN --allow-run-as-root"
passed=0; failed=0; failures=""
log=$(mktemp); trap 'rm -f "$log"' EXIT

spec() { # spec KEY DEFAULT FILE
  v=$(head -n 3 "$3" | sed -n "s/.*mg-test:.*$1=\([^ ]*\).*/\1/p" | head -n 1)
  echo "${v:-$2}"
}
for src in tests/test_*.c; do
  [ -f "$src" ] || continue
  name=$(basename "$src" .c)
  ranks=$(spec ranks 1 "$src" | tr ',' ' ')
  tmo=$(spec timeout 300 "$src")
  flavors=$(spec flavors cpu,cuda,asan "$src" | tr ',' ' ')
  [ -n "$ONLY" ] && case "$name" in *$ONLY*) ;; *) continue ;; esac
  for fl in $flavors; do
    case $fl in cpu) bin=$BUILD/$name ;; *) bin=$BUILD/${name}_$fl ;; esac
    if [ ! -x "$bin" ]; then
      [ "$fl" = cuda ] && [ -z "$(command -v nvcc || ls /usr/local/cuda/bin/nvcc 2>/dev/null)" ] && continue
      echo "not ok - $name [$fl]: not built"; failed=$((failed + 1)); failures="$failures $name[$fl]"; continue
    fi
    for np in $ranks; do
      tag="$name [$fl, $np rank$( [ "$np" = 1 ] || echo s)]"
      echo "# $tag"
      start=$(date +%s)
      if [ "$np" = 1 ]; then
        MG_DEVICE=cpu timeout -k 5 "$tmo" "$bin" > "$log" 2>&1; rc=$?
      else
        MG_DEVICE=cpu timeout -k 5 "$tmo" $MPIRUN -np "$np" "$bin" > "$log" 2>&1; rc=$?
      fi
      p=$(grep -c '^ok ' "$log"); f=$(grep -c '^not ok ' "$log")
      grep -E '^(ok|not ok) ' "$log" | sed 's/^/  /'
      if [ "$rc" != 0 ] && [ "$f" = 0 ]; then
        f=1
        [ "$rc" = 124 ] || [ "$rc" = 137 ] && why="timed out after ${tmo}s" || why="exit status $rc"
        echo "  not ok - $tag: $why"; tail -n 15 "$log" | sed 's/^/  | /'
      elif [ "$f" != 0 ]; then
        grep -v -E '^(ok|not ok) ' "$log" | tail -n 15 | sed 's/^/  | /'
      fi
      [ "$f" != 0 ] && failures="$failures $name[$fl,$np]"
      passed=$((passed + p)); failed=$((failed + f))
      echo "# $tag: $p passed, $f failed, $(( $(date +%s) - start ))s"
    done
  done
done
# tests/gpu/*: GPU against CPU, op by op. Without a GPU they compare two CPU contexts, which
# keeps the programs themselves tested; on a GPU machine this is the CUDA backend's check.
for src in tests/gpu/*.c; do
  [ -f "$src" ] || continue
  name=$(basename "$src" .c); bin=$BUILD/${name}_cuda
  [ -n "$ONLY" ] && case "$name" in *$ONLY*) ;; *) continue ;; esac
  [ -x "$bin" ] || continue
  echo "# $name [cuda]"
  timeout -k 5 300 "$bin" > "$log" 2>&1; rc=$?
  p=$(grep -c '^ok ' "$log"); f=$(grep -c '^not ok ' "$log")
  grep -E '^(not ok) ' "$log" | sed 's/^/  /'
  if [ "$rc" != 0 ] && [ "$f" = 0 ]; then f=1; tail -n 15 "$log" | sed 's/^/  | /'; fi
  [ "$f" != 0 ] && failures="$failures $name[cuda]"
  passed=$((passed + p)); failed=$((failed + f))
  echo "# $name [cuda]: $p passed, $f failed"
done
# tests/cuda_emu: the CUDA path run through the CUDA emulator (build/*_emu, `make emu`).
if [ -z "$ONLY" ] || case cuda_emu in *$ONLY*) true ;; *) false ;; esac; then
  if [ -x "$BUILD/emu_test" ]; then
    echo "# cuda_emu"
    start=$(date +%s)
    BUILD=$BUILD MPIRUN="$MPIRUN" timeout -k 5 600 sh tests/cuda_emu/check.sh > "$log" 2>&1; rc=$?
    p=$(grep -c '^ok ' "$log"); f=$(grep -c '^not ok ' "$log")
    sed 's/^/  /' "$log"
    if [ "$rc" != 0 ] && [ "$f" = 0 ]; then f=1; echo "  not ok - cuda_emu: exit status $rc"; fi
    [ "$f" != 0 ] && failures="$failures cuda_emu"
    passed=$((passed + p)); failed=$((failed + f))
    echo "# cuda_emu: $p passed, $f failed, $(( $(date +%s) - start ))s"
  else
    echo "not ok - cuda_emu: not built (make emu)"; failed=$((failed + 1)); failures="$failures cuda_emu"
  fi
fi
[ -n "$failures" ] && echo "# failing:$failures"
echo "$passed passed, $failed failed"
[ "$failed" = 0 ]
