#!/bin/sh
# Installs the Debian packages megatron.h needs, when run as root; otherwise prints the command.
#   libopenblas-dev           CPU GEMMs (cblas_sgemm)
#   openmpi-bin libopenmpi-dev ranks as processes (mpirun, mpicc)
#   python3-torch python3-numpy  PyTorch on the CPU: the test oracle and the bench peer
#   python3-venv              the .venv of the tokenizer references (tools/install-venv.sh, run last)
#   zlib1g-dev                mg_prepare reads .jsonl.gz input
# The CUDA toolkit (nvcc, cuBLAS, NCCL) is not a Debian package here; `make` builds the CUDA
# programs only where nvcc is found.
PKGS="libopenblas-dev openmpi-bin libopenmpi-dev python3-torch python3-numpy python3-venv zlib1g-dev"
missing=""
for p in $PKGS; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
[ -z "$missing" ] && exec sh "$(dirname "$0")/install-venv.sh"
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  echo "deps: installing:$missing"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >/dev/null && apt-get install -y -qq --no-install-recommends $missing >/dev/null \
    || { echo "deps: apt-get install failed for:$missing" >&2; exit 1; }
  echo "deps: installed:$missing"
else
  echo "deps: missing Debian packages:$missing" >&2
  echo "deps: run: sudo apt-get install -y$missing" >&2
  exit 1
fi
exec sh "$(dirname "$0")/install-venv.sh"
