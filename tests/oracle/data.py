#!/usr/bin/python3
"""Reference files for tests/test_data.c (mg_data.h), written by independent Python code.

    /usr/bin/python3 tests/oracle/data.py tests/data

Writes, all under the given directory, named data_*:
  data_megatron_u16.{bin,idx}, data_megatron_i32.{bin,idx}
        indexed datasets written the way Megatron-LM's IndexedDatasetBuilder /_IndexWriter
        write them (megatron/core/datasets/indexed_dataset.py), with numpy.
  data_megatron.json
        the datasets' contents (sequence lengths, document indices, tokens), and for several
        (split, part, seq_len, n_samples, seed) the GPTDataset indices — document index,
        sample index, shuffle index — built by a transcription of Megatron's
        gpt_dataset.py (_build_document_index, _build_shuffle_index, _get_num_epochs, the
        separate-final-epoch rule) and helpers.cpp (build_sample_idx), using
        numpy.random.RandomState(seed) itself for every shuffle; plus the first samples'
        tokens as _query_document_sample_shuffle_indices returns them.
  data_mt19937.json
        raw MT19937 outputs of numpy's legacy seeding and RandomState.shuffle results.
  data_mock.json
        numpy.random.default_rng(seed) itself (PCG64 seeded by SeedSequence): states, raw
        outputs and Generator.integers draws; Megatron's mock data (a transcription of
        MockGPTLowLevelDataset, megatron/core/datasets/gpt_dataset.py: the sequence lengths
        from default_rng(0), tokens 1 … L−1 modulo the vocabulary, then the end-of-document
        id) and the GPTDataset indices and first samples over it for several cases
        (checksums and heads of the indices: the full arrays are millions of entries).
  data_st_py.safetensors, data_st_py.json
        a safetensors file written with struct + json (F32, BF16, F16 through torch's
        conversions, metadata with escapes, a zero-size tensor, unsorted offsets), and the
        values each tensor must read as (float32 of the stored values).
  data_llmc_gpt2.bin, data_llmc_llama3.bin, data_llmc_eval.bin, data_llmc.json
        llm.c token files of both kinds and an llm.c evaluation file, written by
        transcriptions of llm.c's dev/data/data_common.py write_datafile (HEADERS_INFO) and
        write_evalfile, numpy only; the json holds each token file's tokens and sequence
        lengths (sequences start at each token llm.c's scripts put before a document: 50256
        for GPT-2, 128000, Llama 3's <|begin_of_text|>, for Llama-3).
Needs numpy and torch (only for the 16-bit conversions). Deterministic: the same files every
run, so they are committed.
"""
import functools
import json
import os
import re
import struct
import sys

import numpy

# --------------------------------------------------------------------------------------------
# Megatron's indexed dataset writer (IndexedDatasetBuilder + _IndexWriter), numpy only.
_INDEX_HEADER = b"MMIDIDX\x00\x00"
_CODES = {numpy.uint8: 1, numpy.int8: 2, numpy.int16: 3, numpy.int32: 4, numpy.int64: 5,
          numpy.float64: 6, numpy.float32: 7, numpy.uint16: 8}


def write_indexed(prefix, documents, dtype):
    """documents: list of documents, each a list of sequences (lists of ints)."""
    sequence_lengths, document_indices = [], [0]
    with open(prefix + ".bin", "wb") as data_file:           # add_item + end_document
        for document in documents:
            for sequence in document:
                array = numpy.array(sequence, dtype=dtype)
                data_file.write(array.tobytes(order="C"))
                sequence_lengths.append(array.size)
            document_indices.append(len(sequence_lengths))
    itemsize = numpy.int64(numpy.dtype(dtype).itemsize)     # _IndexWriter._sequence_pointers
    pointers, curr = [], numpy.int64(0)
    for length in sequence_lengths:
        pointers.append(curr.item())
        curr += length * itemsize
    with open(prefix + ".idx", "wb") as w:                  # _IndexWriter.write
        w.write(_INDEX_HEADER)
        w.write(struct.pack("<Q", 1))
        w.write(struct.pack("<B", _CODES[dtype]))
        w.write(struct.pack("<Q", len(sequence_lengths)))
        w.write(struct.pack("<Q", len(document_indices)))
        w.write(numpy.array(sequence_lengths, dtype=numpy.int32).tobytes(order="C"))
        w.write(numpy.array(pointers, dtype=numpy.int64).tobytes(order="C"))
        w.write(numpy.array(document_indices, dtype=numpy.int64).tobytes(order="C"))
    return sequence_lengths, document_indices


# --------------------------------------------------------------------------------------------
# Megatron's GPTDataset index building, transcribed.
def parse_and_normalize_split(split):
    split = list(map(float, re.findall(r"[.0-9]+", split)))
    split = split + [0.0 for _ in range(3 - len(split))]
    assert len(split) == 3
    w = numpy.array(split, dtype=numpy.float64)
    return (w / numpy.sum(w)).tolist()


def convert_split_vector_to_split_matrix(vector):
    expansion = functools.reduce(lambda a, b: a + [a[len(a) - 1] + b], [[0], *vector])
    bookends = list(zip(expansion[:-1], expansion[1:]))
    return [None if b[1] <= b[0] else b for b in bookends]


def build_document_index(documents, num_epochs, rng, separate_final_epoch):
    if not separate_final_epoch or num_epochs == 1:
        document_index = numpy.mgrid[0:num_epochs, 0:len(documents)][1]
        document_index[:] = documents
        document_index = document_index.reshape(-1)
        document_index = document_index.astype(numpy.int32)
        rng.shuffle(document_index)
        return document_index
    first = build_document_index(documents, num_epochs - 1, rng, False)
    last = build_document_index(documents, 1, rng, False)
    return numpy.concatenate((first, last))


def build_shuffle_index(num_samples, total_size, rng):
    dtype_ = numpy.uint32
    if total_size >= (numpy.iinfo(numpy.uint32).max - 1):
        dtype_ = numpy.int64
    first = numpy.arange(start=0, stop=num_samples, step=1, dtype=dtype_)
    rng.shuffle(first)
    if num_samples == total_size:
        return first
    last = numpy.arange(start=num_samples, stop=total_size, step=1, dtype=dtype_)
    rng.shuffle(last)
    return numpy.concatenate((first, last))


def build_sample_idx(sizes, document_idx, seq_length, num_epochs, tokens_per_epoch):
    """helpers.cpp build_sample_idx, drop_last_partial_sequence=True, add_extra_token=1."""
    extra = 1
    num_samples = (num_epochs * tokens_per_epoch - extra) // seq_length
    sample_idx = numpy.zeros((num_samples + 1, 2), dtype=numpy.int64)
    sample_idx_index, document_idx_index, doc_offset = 1, 0, 0
    while sample_idx_index <= num_samples:
        remaining_seq_length = seq_length + extra
        while remaining_seq_length != 0:
            document_index = document_idx[document_idx_index]
            document_length = int(sizes[document_index]) - doc_offset
            remaining_seq_length -= document_length
            if remaining_seq_length <= 0:
                doc_offset += remaining_seq_length + document_length - extra
                remaining_seq_length = 0
            else:
                if document_idx_index == len(document_idx) - 1:
                    assert sample_idx_index == num_samples
                    doc_offset = int(sizes[document_idx[document_idx_index]]) - extra
                    break
                document_idx_index += 1
                doc_offset = 0
        sample_idx[sample_idx_index] = (document_idx_index, doc_offset)
        sample_idx_index += 1
    return sample_idx


def gpt_indices(sizes, split, part, seq_length, num_samples, seed):
    matrix = convert_split_vector_to_split_matrix(parse_and_normalize_split(split))
    n = len(sizes)
    beg = int(round(matrix[part][0] * float(n)))
    end = int(round(matrix[part][1] * float(n)))
    indices = numpy.arange(start=beg, stop=end, step=1, dtype=numpy.int32)
    sizes = numpy.array(sizes, dtype=numpy.int32)
    tokens_per_epoch = int(numpy.sum(sizes[indices]))
    num_epochs, num_tokens = 1, tokens_per_epoch                 # _get_num_epochs
    while num_tokens < num_samples * seq_length + 1:
        num_epochs += 1
        num_tokens += tokens_per_epoch
    separate_final_epoch = False
    if num_epochs > 1:
        sans_final = ((num_epochs - 1) * tokens_per_epoch - 1) // seq_length
        from_final = num_samples - sans_final
        per_epoch = (tokens_per_epoch - 1) // seq_length
        assert 0 <= from_final <= per_epoch + 1
        separate_final_epoch = from_final < int(0.80 * per_epoch)
    rng = numpy.random.RandomState(seed)
    document_index = build_document_index(indices, num_epochs, rng, separate_final_epoch)
    sample_index = build_sample_idx(sizes, document_index, seq_length, num_epochs,
                                    tokens_per_epoch)
    total = sample_index.shape[0] - 1
    if separate_final_epoch:
        shuffle_index = build_shuffle_index(sans_final, total, rng)
    else:
        shuffle_index = build_shuffle_index(total, total, rng)
    return dict(begin=beg, end=end, num_epochs=num_epochs,
                separate_final_epoch=int(separate_final_epoch),
                doc_index=document_index, sample_index=sample_index,
                shuffle_index=shuffle_index)


def query_sample(sequences, ix, idx, seq_length):
    """_query_document_sample_shuffle_indices (no padding: full samples only)."""
    idx = ix["shuffle_index"][idx]
    beg, beg_off = ix["sample_index"][idx]
    end, end_off = ix["sample_index"][idx + 1]
    doc = ix["doc_index"]
    if beg == end:
        parts = [sequences[doc[beg]][beg_off:end_off + 1]]
    else:
        parts = []
        for i in range(beg, end + 1):
            offset = 0 if i > beg else beg_off
            seq = sequences[doc[i]]
            parts.append(seq[offset:] if i < end else seq[offset:end_off + 1])
    tokens = [int(t) for part in parts for t in part]
    assert len(tokens) == seq_length + 1
    return tokens


# --------------------------------------------------------------------------------------------
def megatron_fixtures(out):
    rng = numpy.random.RandomState(7)
    datasets = {}
    for name, dtype, vocab in (("u16", numpy.uint16, 1000), ("i32", numpy.int32, 100000)):
        documents = []
        for d in range(37):
            n_seq = 2 if d % 5 == 3 else 1                     # some documents hold 2 sequences
            document = []
            for s in range(n_seq):
                length = 0 if (d, s) == (11, 0) else int(rng.randint(1, 60))
                document.append([int(t) for t in rng.randint(0, vocab, size=length)])
            documents.append(document)
        lengths, doc_indices = write_indexed(os.path.join(out, "data_megatron_" + name),
                                             documents, dtype)
        sequences = [seq for document in documents for seq in document]
        datasets[name] = dict(lengths=lengths, doc_indices=doc_indices, sequences=sequences)
    cases = []
    # (dataset, split, part, seq_length, num_samples, seed): one epoch, several epochs with and
    # without a separate final epoch, the valid part, another seed, fractional weights.
    for ds, split, part, s, n, seed in (("u16", "969,30,1", 0, 8, 50, 1234),
                                        ("u16", "969,30,1", 0, 16, 300, 1234),
                                        ("u16", "98,2,0", 0, 7, 260, 99),
                                        ("u16", "80,20", 1, 5, 40, 1234),
                                        ("i32", "100,0,0", 0, 12, 400, 5),
                                        ("i32", "0.7, 0.2, 0.1", 2, 4, 30, 2024),
                                        ("u16", "1", 0, 3, 900, 31337)):
        sequences = datasets[ds]["sequences"]
        ix = gpt_indices(datasets[ds]["lengths"], split, part, s, n, seed)
        samples = [query_sample(sequences, ix, i, s) for i in range(min(n, 24))]
        cases.append(dict(dataset=ds, split=split, part=part, seq_len=s, n_samples=n,
                          seed=seed, begin=ix["begin"], end=ix["end"],
                          num_epochs=ix["num_epochs"],
                          separate_final_epoch=ix["separate_final_epoch"],
                          doc_index=[int(x) for x in ix["doc_index"]],
                          sample_index=[int(x) for x in ix["sample_index"].reshape(-1)],
                          shuffle_index=[int(x) for x in ix["shuffle_index"]],
                          samples=samples))
    with open(os.path.join(out, "data_megatron.json"), "w") as f:
        json.dump(dict(datasets=datasets, cases=cases), f, separators=(",", ":"))
    print("  %d sampler cases; separate final epoch in %d" %
          (len(cases), sum(c["separate_final_epoch"] for c in cases)))


def mt19937_fixtures(out):
    raw = []
    for seed in (0, 1, 1234, 4294967295):
        bitgen = numpy.random.MT19937(0)
        bitgen._legacy_seeding(seed)                  # exactly RandomState(seed)'s seeding
        values = bitgen.random_raw(1300)              # crosses two state refills
        raw.append(dict(seed=seed, first=[int(v) for v in values[:8]],
                        at_620=[int(v) for v in values[620:630]],
                        at_1290=[int(v) for v in values[1290:1300]]))
    shuffles = []
    for seed, n in ((1234, 10), (1, 1), (5, 2), (77, 1000), (2**31, 70000)):
        x = numpy.arange(n, dtype=numpy.int32)
        numpy.random.RandomState(seed).shuffle(x)
        shuffles.append(dict(seed=seed, n=n, head=[int(v) for v in x[:20]],
                             checksum=int(numpy.sum(x.astype(numpy.int64) *
                                                    numpy.arange(n, dtype=numpy.int64)))))
    with open(os.path.join(out, "data_mt19937.json"), "w") as f:
        json.dump(dict(raw=raw, shuffles=shuffles), f, separators=(",", ":"))


class MockLowLevel:
    """Megatron's MockGPTLowLevelDataset: seed 0, 100000 sequences, lengths [1, 4096)."""
    seed, size, max_sequence_length = 0, 100000, 4096

    def __init__(self, vocab_size, eod):
        self.vocab_size, self.eod = vocab_size, eod
        rng = numpy.random.default_rng(seed=self.seed)
        self.sequence_lengths = rng.integers(low=1, high=self.max_sequence_length,
                                             size=self.size, dtype=numpy.int32)

    def __getitem__(self, idx):
        length = self.sequence_lengths[idx]
        return numpy.int64(numpy.concatenate([(numpy.arange(length - 1) + 1) % self.vocab_size,
                                              [self.eod]]))


def checksum(a):
    """sum over i of (i mod 1000 + 1) * a[i], exact (Python ints)."""
    a = numpy.asarray(a, dtype=numpy.int64).reshape(-1)
    w = numpy.arange(a.size, dtype=numpy.int64) % 1000 + 1
    return int(numpy.sum(a * w))


def mock_fixtures(out):
    pcg = []
    for seed in (0, 1, 1234, 2**32 + 5, 2**64 - 1):
        st = numpy.random.PCG64(seed).state["state"]
        raw = numpy.random.PCG64(seed).random_raw(5)
        pcg.append(dict(seed="%d" % seed, state="%032x" % st["state"], inc="%032x" % st["inc"],
                        raw=["%016x" % int(v) for v in raw]))
    draws = []
    for seed, low, high in ((0, 1, 4096), (3, 0, 3), (4, 0, 2**31 - 1), (5, -5, 7), (6, 0, 1)):
        x = numpy.random.default_rng(seed).integers(low, high, size=10000, dtype=numpy.int32)
        draws.append(dict(seed=seed, low=low, high=high, head=[int(v) for v in x[:20]],
                          checksum=checksum(x)))
    lows = MockLowLevel(50257, 50256).sequence_lengths
    mock = dict(n_tokens=int(lows.sum(dtype=numpy.int64)), checksum=checksum(lows),
                head=[int(v) for v in lows[:20]], tail=[int(v) for v in lows[-20:]])
    cases = []
    # (vocab, eod, split, part, seq_length, num_samples, seed, samples to keep)
    for vocab, eod, split, part, s, n, seed, keep in (
            (50257, 50256, "969,30,1", 0, 1024, 64, 1234, 6),
            (1001, 1000, "969,30,1", 1, 256, 3000, 1234, 8),     # NullTokenizer --vocab-size 1000
            (50257, 50256, "98,2,0", 1, 2048, 2100, 7, 4)):       # a separate final epoch
        low = MockLowLevel(vocab, eod)
        ix = gpt_indices(low.sequence_lengths, split, part, s, n, seed)
        samples = [query_sample(low, ix, i, s) for i in range(keep)]
        cases.append(dict(vocab=vocab, eod=eod, split=split, part=part, seq_len=s, n_samples=n,
                          seed=seed, begin=ix["begin"], end=ix["end"],
                          num_epochs=ix["num_epochs"],
                          separate_final_epoch=ix["separate_final_epoch"],
                          n_doc_index=int(ix["doc_index"].size),
                          doc_index=checksum(ix["doc_index"]),
                          doc_index_head=[int(x) for x in ix["doc_index"][:16]],
                          n_total=int(ix["shuffle_index"].size),
                          sample_index=checksum(ix["sample_index"]),
                          shuffle_index=checksum(ix["shuffle_index"]),
                          shuffle_head=[int(x) for x in ix["shuffle_index"][:16]],
                          samples=samples))
    with open(os.path.join(out, "data_mock.json"), "w") as f:
        json.dump(dict(pcg64=pcg, integers=draws, mock=mock, cases=cases), f,
                  separators=(",", ":"))
    print("  %d mock cases; epochs %s" % (len(cases), [c["num_epochs"] for c in cases]))


def safetensors_fixture(out):
    import torch
    g = torch.Generator().manual_seed(3)
    tensors = {
        "h.0.attn.c_attn.weight": torch.randn(4, 12, generator=g),              # F32
        "wte.weight": torch.randn(5, 4, generator=g).to(torch.bfloat16),       # BF16
        "ln_f.bias": (torch.randn(4, generator=g) * 100).to(torch.float16),    # F16
        "empty": torch.zeros(0, 3),                                            # zero-size
        "scalar": torch.tensor(2.5),                                           # 0-dim
        "name with \"quotes\" and \u00e9": torch.arange(3, dtype=torch.float32),
    }
    names = {torch.float32: "F32", torch.bfloat16: "BF16", torch.float16: "F16"}
    header, blobs, offset = {"__metadata__": {"format": "pt", "note": "tab\there \u2713"}}, [], 0
    # Lay the data out in reverse name order, so the JSON key order differs from the offsets.
    for name in sorted(tensors, reverse=True):
        t = tensors[name]
        raw = t.contiguous().view(torch.int16 if t.element_size() == 2 else torch.int32)
        blob = raw.numpy().tobytes()
        header[name] = {"dtype": names[t.dtype], "shape": list(t.shape),
                        "data_offsets": [offset, offset + len(blob)]}
        blobs.append(blob)
        offset += len(blob)
    text = json.dumps(header, ensure_ascii=True).encode()   # \u escapes in keys and values
    text += b" " * ((8 - len(text) % 8) % 8)
    with open(os.path.join(out, "data_st_py.safetensors"), "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for blob in blobs:
            f.write(blob)
    expect = {name: dict(dtype=names[t.dtype], shape=list(t.shape),
                         values=[float(v) for v in t.float().reshape(-1).tolist()])
              for name, t in tensors.items()}
    with open(os.path.join(out, "data_st_py.json"), "w") as f:
        json.dump(dict(tensors=expect, metadata=header["__metadata__"]), f)


# --------------------------------------------------------------------------------------------
# llm.c's token and evaluation files (karpathy/llm.c dev/data/data_common.py), numpy only.
_LLMC_HEADERS_INFO = {
    "gpt-2": {"magic": 20240520, "version": 1, "token_dtype": numpy.uint16},
    "llama-3": {"magic": 20240801, "version": 7, "token_dtype": numpy.uint32},
}


def llmc_write_datafile(filename, toks, model_desc):
    assert len(toks) < 2**31
    info = _LLMC_HEADERS_INFO[model_desc]
    header = numpy.zeros(256, dtype=numpy.int32)
    header[0] = info["magic"]
    header[1] = info["version"]
    header[2] = len(toks)
    toks_np = numpy.array(toks, dtype=info["token_dtype"])
    with open(filename, "wb") as f:
        f.write(header.tobytes())
        f.write(toks_np.tobytes())


def llmc_write_evalfile(filename, datas):
    header = numpy.zeros(256, dtype=numpy.int32)
    header[0] = 20240522
    header[1] = 1
    header[2] = len(datas)
    stream, longest = [], 0
    for idx, data in enumerate(datas):
        ex = [2**16 - 1, 0, idx, data["label"], len(data["ending_tokens"])]
        ex += [len(data["ctx_tokens"])] + data["ctx_tokens"]
        for end in data["ending_tokens"]:
            ex += [len(end)] + end
        ex[1] = 2 * len(ex)
        longest = max(longest, ex[1])
        stream += ex
    header[3] = longest
    with open(filename, "wb") as f:
        f.write(header.tobytes())
        f.write(numpy.array(stream, dtype=numpy.uint16).tobytes())


def llmc_fixtures(out):
    kinds = {
        # documents start at 50256; 65535 is the largest uint16
        "gpt2": ("gpt-2", [50256, 15496, 995, 50256, 0, 65535, 50256, 11]),
        # documents start at 128000; ids above 65535 (up to uint32's largest); 50256 is an
        # ordinary token here
        "llama3": ("llama-3", [128000, 9906, 50256, 0, 65535, 65536, 70000, 128000, 128255, 5,
                               128000, 100276, 2**32 - 1]),
    }
    expect = {}
    for name, (desc, toks) in kinds.items():
        llmc_write_datafile(os.path.join(out, "data_llmc_%s.bin" % name), toks, desc)
        start = 50256 if desc == "gpt-2" else 128000
        cuts = [i for i, t in enumerate(toks) if i == 0 or t == start] + [len(toks)]
        expect[name] = dict(tokens=toks, seq_lens=[b - a for a, b in zip(cuts, cuts[1:])])
    llmc_write_evalfile(os.path.join(out, "data_llmc_eval.bin"),
                        [dict(label=2, ctx_tokens=[464, 3797], ending_tokens=[[318], [373, 257],
                                                                                [1110], [257]])])
    with open(os.path.join(out, "data_llmc.json"), "w") as f:
        json.dump(expect, f)


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else "tests/data"
    os.makedirs(out, exist_ok=True)
    megatron_fixtures(out)
    mt19937_fixtures(out)
    mock_fixtures(out)
    safetensors_fixture(out)
    llmc_fixtures(out)


if __name__ == "__main__":
    main()
