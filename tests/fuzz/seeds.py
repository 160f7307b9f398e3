"""tests/fuzz/seeds.py OUTDIR — seed corpora for the mg_data.h fuzz harnesses, built from the
valid fixtures in tests/data plus a few tiny hand-made files (nothing is committed but this
script). Writes OUTDIR/{json,safetensors,idx,llmc,state,tokenizer_*}/<name>. Standard library only."""
import os
import struct
import sys

DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "data")


def read(name):
    with open(os.path.join(DATA, name), "rb") as f:
        return f.read()


def put(out, kind, name, blob):
    d = os.path.join(out, kind)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(blob)


def st_header(blob):
    (n,) = struct.unpack_from("<Q", blob)
    return blob[8:8 + n]


def tiny_safetensors():
    """Two tensors and metadata, laid out as the reference writer does."""
    hdr = (b'{"__metadata__":{"format":"pt"},'
           b'"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},'
           b'"b":{"dtype":"BF16","shape":[1,2],"data_offsets":[8,12]},'
           b'"e":{"dtype":"I64","shape":[0,3],"data_offsets":[12,12]}}')
    hdr += b" " * (-(8 + len(hdr)) % 8)
    return struct.pack("<Q", len(hdr)) + hdr + bytes(range(12))


def llmc_checkpoint(version, maxT=2, V=3, L=1, NH=1, C=2, Vp=4):
    n = Vp * C + maxT * C + L * (12 * C * C + 13 * C) + 2 * C
    header = struct.pack("<8i", 20240326, version, maxT, V, L, NH, C, Vp) + bytes(4 * 248)
    size = 4 if version == 3 else 2
    return header + bytes((i * 7) % 256 for i in range(n * size))


def llmc_tokens(tokens, llama3=False):
    """llm.c's write_datafile: GPT-2 kind (20240520, 1, uint16) or Llama-3 kind (20240801, 7,
    uint32)."""
    magic, version, fmt = (20240801, 7, "I") if llama3 else (20240520, 1, "H")
    header = struct.pack("<3i", magic, version, len(tokens)) + bytes(4 * 253)
    return header + struct.pack("<%d%s" % (len(tokens), fmt), *tokens)


def idx_file(code, lengths, docs):
    size = {1: 1, 2: 1, 3: 2, 4: 4, 5: 8, 8: 2}[code]
    head = b"MMIDIDX\x00\x00" + struct.pack("<QBQQ", 1, code, len(lengths), len(docs))
    ptrs, at = [], 0
    for n in lengths:
        ptrs.append(at)
        at += n * size
    body = struct.pack("<%di" % len(lengths), *lengths) + struct.pack("<%dq" % len(ptrs), *ptrs)
    return head + body + struct.pack("<%dq" % len(docs), *docs), at


def idx_seed(params, idx, bin_):
    return bytes(params) + struct.pack("<I", len(idx)) + idx + bin_


def main():
    out = sys.argv[1]
    tok_seeds(out)
    # JSON: every JSON fixture, the safetensors headers, a few edge documents.
    for name in ["gpt_config.json", "gpt_ref.json", "data_st_py.json", "data_mt19937.json"]:
        put(out, "json", name, read(name))
    for name in ["gpt_model.safetensors", "data_st_py.safetensors", "gpt_ref.safetensors"]:
        put(out, "json", name + ".header", st_header(read(name)))
    put(out, "json", "edge", b'{"a":[1,-2,3.5e2,true,false,null,{},[]],"b":"x\\u00e9\\ud83d\\ude00\\n"}')
    put(out, "json", "deep", b"[" * 63 + b"]" * 63)
    # safetensors: the small fixtures and a hand-made file.
    for name in ["data_st_py.safetensors", "gpt_ref.safetensors"]:
        put(out, "safetensors", name, read(name))
    put(out, "safetensors", "tiny", tiny_safetensors())
    # Megatron indexed datasets, with varied sampler parameters.
    for k, name in enumerate(["data_megatron_u16", "data_megatron_i32"]):
        params = [7 + k, 40, 0, k, 1, 0, 3, 0]
        put(out, "idx", name, idx_seed(params, read(name + ".idx"), read(name + ".bin")))
    idx, nbytes = idx_file(8, [3, 0, 2, 4], [0, 2, 4])
    put(out, "idx", "tiny_u16", idx_seed([3, 9, 0, 0, 0, 0, 1, 0], idx, bytes(range(nbytes))))
    idx, nbytes = idx_file(5, [2, 1], [0, 1, 2])
    put(out, "idx", "tiny_i64", idx_seed([1, 5, 0, 1, 2, 1, 0, 0], idx, bytes(nbytes)))
    # llm.c: the token fixture, tiny token files, tiny checkpoints (fp32 and bf16).
    put(out, "llmc", "gpt_tokens.bin", read("gpt_tokens.bin"))
    put(out, "llmc", "tokens_eot", llmc_tokens([50256, 1, 2, 3, 50256, 4, 50256, 50256, 5, 6]))
    put(out, "llmc", "tokens_plain", llmc_tokens(list(range(1, 12))))
    put(out, "llmc", "tokens_llama3", llmc_tokens([128000, 9906, 70000, 128000, 5, 2**32 - 1],
                                                  llama3=True))
    put(out, "llmc", "data_llmc_eval.bin", read("data_llmc_eval.bin"))
    put(out, "llmc", "ckpt_v3", llmc_checkpoint(3))
    put(out, "llmc", "ckpt_v5", llmc_checkpoint(5))
    # the trainer's small files: a state.json as mg_trainer_save writes it (fp16 run, the
    # flag dump shortened), config.json files, and latest_checkpointed_iteration.txt lines.
    put(out, "state", "state.json", STATE_JSON)
    put(out, "state", "state_fp32.json", STATE_JSON.replace(
        b'  "loss_scale": 4294967296, "loss_scale_growth_tracker": 0, '
        b'"loss_scale_hysteresis_tracker": 1,\n', b""))
    for name in ["hf_lm/config.json", "hf_base/config.json", "gpt_config.json"]:
        put(out, "state", name.replace("/", "_"), read(name))
        put(out, "json", name.replace("/", "_"), read(name))
    for k, line in enumerate([b"1\n", b"300", b" 42 \r\n", b"release\n", b"0"]):
        put(out, "state", "latest_%d" % k, line)


STATE_JSON = b"""{
  "format": "megatron.h checkpoint", "version": 1,
  "iteration": 1, "consumed_train_samples": 1, "consumed_valid_samples": 0,
  "adam_step": 0, "skipped_iterations": 1, "nan_iterations": 0,
  "seed": 1234, "data_order_index": 0,
  "loss_scale": 4294967296, "loss_scale_growth_tracker": 0, "loss_scale_hysteresis_tracker": 1,
  "num_layers": 1,
  "hidden_size": 16,
  "num_attention_heads": 2,
  "seq_length": 8,
  "max_position_embeddings": 8,
  "vocab_size": 37,
  "padded_vocab_size": 128,
  "args": {
    "num-layers": 1,
    "hidden-size": 16,
    "lr": 0.001,
    "fp16": true,
    "data-path": "tests/data/gpt_tokens.bin",
    "save": null
  }
}
"""


# --- mg_tokenizer.h seeds: tiny vocabularies in each format --------------------------------------
def b2u():
    bs = list(range(33, 127)) + list(range(161, 173)) + list(range(174, 256))
    cs, n = bs[:], 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(bs, cs)}


TOK_MERGES = [("h", "e"), ("l", "l"), ("he", "ll"), ("hell", "o"), ("\u0120", "w"), ("o", "r")]


def tok_vocab():
    m = b2u()
    vocab = {m[b]: b for b in range(256)}
    for a, b in TOK_MERGES:
        vocab.setdefault(a + b, len(vocab))
    vocab["<|endoftext|>"] = len(vocab)
    return vocab


def tok_json_seeds(out):
    import json
    vocab = tok_vocab()
    merges = ["%s %s" % ab for ab in TOK_MERGES]
    put(out, "tokenizer_json", "gpt2", b"\x01" + json.dumps(vocab).encode() + b"\0#version: 0.2\n" + "\n".join(merges).encode("utf-8") + b"\n")
    hf = {"version": "1.0", "added_tokens": [{"id": vocab["<|endoftext|>"], "content": "<|endoftext|>", "special": True,
                                              "lstrip": False, "rstrip": False, "single_word": False, "normalized": False}],
          "normalizer": None,
          "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
              {"type": "Split", "pattern": {"Regex": "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"},
               "behavior": "Isolated", "invert": False},
              {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False}]},
          "decoder": {"type": "ByteLevel"},
          "model": {"type": "BPE", "ignore_merges": True, "vocab": vocab, "merges": [list(x.split(" ")) for x in merges]}}
    put(out, "tokenizer_json", "hf_llama3", b"\x00" + json.dumps(hf).encode())
    hf["pre_tokenizer"] = {"type": "ByteLevel", "add_prefix_space": True, "use_regex": True}
    hf["model"]["merges"] = merges
    put(out, "tokenizer_json", "hf_gpt2", b"\x00" + json.dumps(hf).encode())


def tok_tiktoken_seeds(out):
    import base64
    lines = [base64.b64encode(bytes([b])) + b" %d" % b for b in range(256)]
    for i, t in enumerate([b"he", b"ll", b"hell", b"hello", b" w", b"or", b" world"]):
        lines.append(base64.b64encode(t) + b" %d" % (256 + i))
    blob = b"\n".join(lines) + b"\n"
    for k in range(4):
        put(out, "tokenizer_tiktoken", "ranks_%d" % k, bytes([k]) + blob)


def pb_varint(v):
    o = b""
    while True:
        c = v & 0x7F
        v >>= 7
        if v:
            o += bytes([c | 0x80])
        else:
            return o + bytes([c])


def pb_len(field, blob):
    return pb_varint(field << 3 | 2) + pb_varint(len(blob)) + blob


def pb_piece(piece, score, typ):
    return pb_len(1, pb_len(1, piece.encode()) + pb_varint(2 << 3 | 5) + struct.pack("<f", score) + pb_varint(3 << 3) + pb_varint(typ))


def tok_spm_seed():
    """A SentencePiece BPE ModelProto: <unk> <s> </s>, 256 byte pieces, a few merged pieces."""
    m = pb_piece("<unk>", 0, 2) + pb_piece("<s>", 0, 3) + pb_piece("</s>", 0, 3)
    m += b"".join(pb_piece("<0x%02X>" % b, 0, 6) for b in range(256))
    for i, p in enumerate(["\u2581", "h", "e", "l", "o", "w", "\u2581h", "ll", "\u2581he", "\u2581hell", "\u2581hello"]):
        m += pb_piece(p, -float(i), 1)
    trainer = pb_varint(3 << 3) + pb_varint(2) + pb_varint(35 << 3) + pb_varint(1)
    normalizer = pb_len(1, b"identity") + pb_varint(3 << 3) + pb_varint(1) + pb_varint(4 << 3) + pb_varint(0)
    return m + pb_len(2, trainer) + pb_len(3, normalizer)


def tok_seeds(out):
    tok_json_seeds(out)
    tok_tiktoken_seeds(out)
    put(out, "tokenizer_spm", "bpe_byte_fallback", tok_spm_seed())
    texts = ["Hello world! It's 42.", "caf\u00e9 \u65e5\u672c\u8a9e \U0001F44D\U0001F3FD <|endoftext|>", "  \n\n\t x  y   ",
             "cafe\u0301 a\u0323\u0302 \u1112\u1161\u11ab \ud55c \u0915\u093c \ufb01 \u212aelvin >\u0338 \u0f73"]
    for i, t in enumerate(texts):
        for k in range(9):  # tokenizers 7 and 8 have normalizers (NFC; NFKC then NFD)
            put(out, "tokenizer_encode", "t%d_%d" % (i, k), bytes([k]) + t.encode("utf-8") + b"\xff\xed\xa0\x80")
    pats = ["'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+",
            "'(?i:[sdmt]|ll|ve|re)|[^\\r\\n\\p{L}\\p{N}]?+\\p{L}++|\\p{N}{1,3}+| ?[^\\s\\p{L}\\p{N}]++[\\r\\n]*+|\\s++$|\\s*[\\r\\n]|\\s+(?!\\S)|\\s",
            "[\\p{Lu}\\p{Lt}]*?[\\p{Ll}\\p{M}]+(?=x)|a{2,4}b??|(?>ab|a)c|[^a-c\\d]\\w\\x{41}."]
    for i, p in enumerate(pats):
        put(out, "tokenizer_regex", "p%d" % i, p.encode() + b"\0" + texts[i].encode("utf-8"))


if __name__ == "__main__":
    main()
