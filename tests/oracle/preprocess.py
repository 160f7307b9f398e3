#!/usr/bin/python3
"""Reference files for tests/test_prepare.c (tools/mg_prepare), written by independent Python
code that follows Megatron-LM's tools/preprocess_data.py and its IndexedDatasetBuilder.

    /usr/bin/python3 tests/oracle/preprocess.py tests/data

Writes, under the given directory:
  prep_input.jsonl, prep_input.jsonl.gz
        a JSON-lines corpus made here (json.dumps, with and without ensure_ascii): English,
        accents, CJK, Arabic, emoji as raw UTF-8 and as \\u escapes (surrogate pairs), escaped
        quotes, backslashes, control characters and newlines, an empty text, a list of
        sentences with an empty one, a 20 KB document, and a second key "title"; the .gz holds
        the same bytes (gzip, mtime 0).
  prep_ref_eod_text_document.{bin,idx}, prep_ref_eod_title_document.{bin,idx}
        --json-keys text title --append-eod, uint16 (the vocabulary, 256, is < 65500);
  prep_ref_i32_text_document.{bin,idx}
        --json-keys text, no --append-eod, int32 storage.
The tokenizer is the byte tokenizer (ids = the UTF-8 bytes of the text; end of document 255),
so the reference needs no vocabulary file; what is checked is preprocess_data's document rules
(Encoder.encode: a list is one sequence per string, empty token lists are dropped, the EOD
token lengthens the last sequence of a non-empty document) and the byte layout of the .bin and
.idx files (IndexedDatasetBuilder.add_document / finalize, _IndexWriter.write). Needs numpy. Deterministic: the same files every run, so they are committed.

    .venv/bin/python tests/oracle/preprocess.py --tiktoken RANKS.tiktoken INPUT PREFIX

(run by tests/test_prepare.c with the install step's .venv) writes PREFIX_text_document.bin/.idx
for INPUT with --append-eod and GPT-2's tokenizer driven offline through tiktoken.Encoding
(the r50k/gpt2 pattern, <|endoftext|> = 50256, text encoded as ordinary text).
"""
import gzip
import json
import os
import random
import struct
import sys

import numpy

_INDEX_HEADER = b"MMIDIDX\x00\x00"
DTYPE_CODE = {numpy.uint8: 1, numpy.int8: 2, numpy.int16: 3, numpy.int32: 4, numpy.int64: 5,
              numpy.float64: 6, numpy.float32: 7, numpy.uint16: 8}


def optimal_dtype(vocab_size):
    """DType.optimal_dtype"""
    return numpy.uint16 if vocab_size is not None and vocab_size < 65500 else numpy.int32


class IndexedDatasetBuilder:
    """megatron/core/datasets/indexed_dataset.py's builder, without the multimodal modes."""

    def __init__(self, bin_path, dtype):
        self.data_file = open(bin_path, "wb")
        self.dtype = dtype
        self.sequence_lengths = []
        self.document_indices = [0]

    def add_document(self, tokens, lengths):
        np_array = numpy.array(tokens, dtype=self.dtype)
        self.data_file.write(np_array.tobytes(order="C"))
        self.sequence_lengths.extend(lengths)
        self.document_indices.append(len(self.sequence_lengths))

    def finalize(self, idx_path):
        self.data_file.close()
        itemsize = numpy.int64(numpy.dtype(self.dtype).itemsize)
        pointers, ptr = [], numpy.int64(0)
        for length in self.sequence_lengths:          # _IndexWriter._sequence_pointers
            pointers.append(ptr.item())
            ptr += length * itemsize
        with open(idx_path, "wb") as f:               # _IndexWriter.__enter__ + write
            f.write(_INDEX_HEADER)
            f.write(struct.pack("<Q", 1))
            f.write(struct.pack("<B", DTYPE_CODE[self.dtype]))
            f.write(struct.pack("<Q", len(self.sequence_lengths)))
            f.write(struct.pack("<Q", len(self.document_indices)))
            f.write(numpy.array(self.sequence_lengths, dtype=numpy.int32).tobytes(order="C"))
            f.write(numpy.array(pointers, dtype=numpy.int64).tobytes(order="C"))
            f.write(numpy.array(self.document_indices, dtype=numpy.int64).tobytes(order="C"))


class ByteTokenizer:
    vocab_size = 256
    eod = 255

    def tokenize(self, text):
        return list(text.encode("utf-8"))


def encode(json_line, keys, tokenizer, append_eod):
    """preprocess_data.py's Encoder.encode"""
    data = json.loads(json_line)
    ids, lens = {}, {}
    for key in keys:
        text = data[key]
        sentences = text if isinstance(text, list) else [text]
        doc_ids, sentence_lens = [], []
        for sentence in sentences:
            sentence_ids = tokenizer.tokenize(sentence)
            if len(sentence_ids) > 0:
                doc_ids.extend(sentence_ids)
                sentence_lens.append(len(sentence_ids))
        if len(doc_ids) > 0 and append_eod:
            doc_ids.append(tokenizer.eod)
            sentence_lens[-1] += 1
        ids[key] = doc_ids
        lens[key] = sentence_lens
    return ids, lens


class GPT2TikToken:
    """GPT-2's ranks through tiktoken, no network: tiktoken.Encoding built from the file."""

    def __init__(self, ranks_path):
        import tiktoken
        from tiktoken.load import load_tiktoken_bpe
        from tiktoken_ext.openai_public import r50k_pat_str
        ranks = load_tiktoken_bpe(ranks_path)
        self.eod = len(ranks)                       # <|endoftext|>, 50256
        self.vocab_size = len(ranks) + 1
        self.enc = tiktoken.Encoding(name="gpt2", pat_str=r50k_pat_str, mergeable_ranks=ranks,
                                     special_tokens={"<|endoftext|>": self.eod})

    def tokenize(self, text):
        return self.enc.encode_ordinary(text)


def preprocess(input_path, prefix, keys, append_eod, dtype=None, tokenizer=None):
    """preprocess_data.py's process_json_file (one partition), every builder finalised."""
    tokenizer = tokenizer or ByteTokenizer()
    dtype = dtype or optimal_dtype(tokenizer.vocab_size)
    builders = {k: IndexedDatasetBuilder(f"{prefix}_{k}_document.bin", dtype) for k in keys}
    with open(input_path, "r", encoding="utf-8") as fin:
        for line in fin:
            doc, sentence_lens = encode(line, keys, tokenizer, append_eod)
            for key in doc.keys():
                builders[key].add_document(doc[key], sentence_lens[key])
    for k in keys:
        builders[k].finalize(f"{prefix}_{k}_document.idx")


def corpus():
    rng = random.Random(17)
    words = ["the", "river", "town", "bread", "café", "naïve", "東京", "مرحبا", "नमस्ते", "😀",
             "e\u0301", "\"quoted\"", "back\\slash", "tab\there", "line\nbreak", "\u0007bell",
             "\u2028sep", "Ünïcödé", "💡🚀", "x"]
    lines = []
    for i in range(200):
        n = rng.randint(0, 30)
        text = " ".join(rng.choice(words) for _ in range(n))
        title = f"Title {i}: " + rng.choice(words)
        if i % 17 == 5:
            text = ""                                   # an empty document
        if i % 23 == 7:                                 # pre-split sentences, one empty
            value = [text[: len(text) // 2], "", text[len(text) // 2:] + "."]
        else:
            value = text
        if i == 100:
            value = " ".join(rng.choice(words) for _ in range(3000))   # about 20 KB
        obj = {"id": i, "text": value, "title": title, "meta": {"n": n, "ok": True}}
        lines.append(json.dumps(obj, ensure_ascii=(i % 2 == 0)))
    return "\n".join(lines) + "\n"


def main():
    if len(sys.argv) == 5 and sys.argv[1] == "--tiktoken":
        preprocess(sys.argv[3], sys.argv[4], ["text"], True, tokenizer=GPT2TikToken(sys.argv[2]))
        return
    out = sys.argv[1] if len(sys.argv) > 1 else "tests/data"
    os.makedirs(out, exist_ok=True)
    src = os.path.join(out, "prep_input.jsonl")
    text = corpus()
    with open(src, "w", encoding="utf-8") as f:
        f.write(text)
    with open(src + ".gz", "wb") as raw:
        with gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0) as gz:
            gz.write(text.encode("utf-8"))
    preprocess(src, os.path.join(out, "prep_ref_eod"), ["text", "title"], True)
    preprocess(src, os.path.join(out, "prep_ref_i32"), ["text"], False, numpy.int32)


if __name__ == "__main__":
    main()
