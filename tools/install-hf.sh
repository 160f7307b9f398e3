#!/bin/sh
# tools/install-hf.sh — Hugging Face `transformers` for the Llama-family interop oracle
# (tests/oracle/hf_llama.py, run by `make oracle` and by tests/test_hf_llama), from PyPI into the
# repository's virtual environment .venv (git-ignored), pinned:
#   transformers 4.44.2   the last release that runs on Debian 12's torch 1.13 (python3-torch)
#   and its dependencies at versions of the same season (tokenizers 0.19, huggingface_hub 0.24)
# They go to .venv/hf (pip --target, no dependency resolution), which hf_llama.py puts first on
# sys.path: .venv's own site-packages may hold newer tokenizers/huggingface_hub for other tools,
# and transformers 4.44 refuses those. Run by `make deps`; quick when already installed (the
# pins are stamped in .venv/hf/.pins).
set -e
cd "$(dirname "$0")/.."
PY=${PYTHON:-/usr/bin/python3}
PINS="transformers==4.44.2 tokenizers==0.19.1 huggingface_hub==0.24.6 safetensors==0.4.5 \
regex==2024.7.24 tqdm==4.66.5 filelock==3.15.4 packaging==24.1 fsspec==2024.6.1"
[ -f .venv/hf/.pins ] && [ "$(cat .venv/hf/.pins)" = "$PINS" ] && exit 0
if ! "$PY" -c 'import ensurepip' 2>/dev/null; then   # Debian keeps venv's pip in python3-venv
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends python3-venv \
      >/dev/null || { echo "hf: apt-get install python3-venv failed" >&2; exit 1; }
  else
    echo "hf: python3-venv missing; run: sudo apt-get install -y python3-venv" >&2; exit 1
  fi
fi
echo "hf: installing $PINS into .venv/hf"
[ -x .venv/bin/python ] || "$PY" -m venv --system-site-packages .venv
rm -rf .venv/hf
.venv/bin/pip install -q --disable-pip-version-check --no-deps --target .venv/hf $PINS
echo "$PINS" > .venv/hf/.pins
echo "hf: ready (.venv/hf)"
