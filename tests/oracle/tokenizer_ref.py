#!/usr/bin/env python3
"""tests/oracle/tokenizer_ref.py OUTDIR — reference token ids from the reference libraries, for
tests/test_tokenizer.c (which runs it with .venv/bin/python; tools/install-deps.sh makes the venv).

Makes, under OUTDIR (only what is missing):
  gpt2_vocab.json, gpt2_merges.txt  GPT-2's vocabulary and merges, recovered from GPT-2's ranks
                                    (gpt2.tiktoken from the openai-whisper sdist): merge k is the
                                    split of token 256+k that BPE with the lower ranks reaches
  hf_gpt2.json                      the same as a tokenizer.json, built by `tokenizers` itself
  hf_gpt2_prefix.json               the same with ByteLevel(add_prefix_space=True)
  hf_llama3.json                    a byte-level BPE trained here by `tokenizers`' trainer on
                                    data/*.txt with Llama 3's Split regex + ByteLevel(use_regex=False)
  spm.model                         a SentencePiece BPE trained here on data/*.txt with byte
                                    fallback and Llama 2's normalizer settings
  spm_user.model                    one with user-defined pieces, remove_extra_whitespaces and
                                    no byte fallback (unknown characters are <unk>)
  spm_nfkc.model                    one with sentencepiece's default nmt_nfkc normalization
and writes, for each tokenizer NAME, OUTDIR/ref_NAME.bin: for every test text, the ids the
reference library gives (records: u32 name length, name, u32 allow_special, u32 text length,
text, u32 id count, ids as i32, u32 decoded length, the reference's decode of those ids).
unicode_classes.bin: for \\p{L} \\p{Lu} \\p{Ll} \\p{Lt} \\p{Lm} \\p{Lo} \\p{N} \\p{M} \\s, every code
point tiktoken's regex (Rust `regex`) and tokenizers' (Oniguruma) put in the class (u32 class
name length, name, u32 count, code points as u32), checked to agree between the two first;
hf_qwen2.json: a Qwen2-style tokenizer.json (normalizer NFC) trained here, hf_nfkc_seq.json: the
same under Sequence([NFKC, NFD]), hf_bad_norm.json under Sequence([NFC, Lowercase]); their ref_*.bin cover the texts above plus normalization texts.
norm_FORM.bin: unicodedata2's NFC/NFD/NFKC/NFKD of every code point and of random sequences.
class_X.json: a tokenizer.json whose only pattern is CLASS+ (the C test splits all of Unicode
with it and reads the class back). pat_NAME.json + pieces_NAME.bin: the pre-token boundaries
tokenizers' Split gives for the patterns of GPT-2, r50k, cl100k, o200k, Llama 3 and Qwen2.
"""
import glob
import os
import struct
import sys

if __name__ == "__main__" and (len(sys.argv) < 2 or sys.argv[1] == "tests/data"):
    # `make oracle` runs every tests/oracle/*.py with tests/data: this one is run by the test
    print("tokenizer_ref: run by tests/test_tokenizer with .venv/bin/python; nothing to do here")
    sys.exit(0)

import inspect  # noqa: E402
import tiktoken  # noqa: E402
from tiktoken.load import load_tiktoken_bpe  # noqa: E402
from tiktoken_ext import openai_public  # noqa: E402
import tokenizers  # noqa: E402
from tokenizers import Tokenizer, Regex, models, normalizers, pre_tokenizers, decoders, trainers  # noqa: E402
import unicodedata2  # noqa: E402
import random  # noqa: E402
import sentencepiece as spm  # noqa: E402

OUT = sys.argv[1] if __name__ == "__main__" else None
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
VOCAB = os.path.join(ROOT, ".venv", "share", "vocab")
DATA = sorted(glob.glob(os.path.join(ROOT, "data", "*.txt")))

# GPT-2's pattern (HF ByteLevel with use_regex, Megatron's GPT2BPETokenizer) and Qwen2's Split
GPT2_PAT = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
QWEN2_SPLIT = (r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+"""
               r"""|\s+(?!\S)|\s+""")
LLAMA3_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                r"|\s*[\r\n]+|\s+(?!\S)|\s+")


def bytes_to_unicode():
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs, n = bs[:], 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(bs, cs)}


def recover_merges(ranks):
    """GPT-2's merges from its ranks: token t (rank r) splits into the two parts that BPE with
    only the ranks below r leaves (tiktoken's own conversion argument)."""
    merges = []
    for tok, r in sorted(ranks.items(), key=lambda kv: kv[1]):
        if len(tok) == 1:
            continue
        parts = [bytes([b]) for b in tok]
        while True:
            best = None
            for i in range(len(parts) - 1):
                rr = ranks.get(parts[i] + parts[i + 1])
                if rr is not None and rr < r and (best is None or rr < best[0]):
                    best = (rr, i)
            if best is None:
                break
            i = best[1]
            parts[i:i + 2] = [parts[i] + parts[i + 1]]
        assert len(parts) == 2, tok
        merges.append((parts[0], parts[1]))
    return merges


def make_assets():
    b2u = bytes_to_unicode()
    enc = lambda b: "".join(b2u[x] for x in b)  # noqa: E731
    vocab_json = os.path.join(OUT, "gpt2_vocab.json")
    merges_txt = os.path.join(OUT, "gpt2_merges.txt")
    if not os.path.exists(merges_txt):
        ranks = load_tiktoken_bpe(os.path.join(VOCAB, "gpt2.tiktoken"))
        vocab = {enc(t): r for t, r in ranks.items()}
        vocab["<|endoftext|>"] = 50256
        import json
        with open(vocab_json + ".tmp", "w", encoding="utf-8") as f:
            json.dump(vocab, f, ensure_ascii=False)
        with open(merges_txt + ".tmp", "w", encoding="utf-8") as f:
            f.write("#version: 0.2\n")
            for a, b in recover_merges(ranks):
                f.write("%s %s\n" % (enc(a), enc(b)))
        os.rename(vocab_json + ".tmp", vocab_json)
        os.rename(merges_txt + ".tmp", merges_txt)
    for name, prefix in (("hf_gpt2.json", False), ("hf_gpt2_prefix.json", True)):
        path = os.path.join(OUT, name)
        if not os.path.exists(path):
            tok = Tokenizer(models.BPE.from_file(vocab_json, merges_txt))
            tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=prefix)
            tok.decoder = decoders.ByteLevel()
            tok.add_special_tokens(["<|endoftext|>"])
            tok.save(path)
    hf_llama3 = os.path.join(OUT, "hf_llama3.json")
    if not os.path.exists(hf_llama3):
        tok = Tokenizer(models.BPE(ignore_merges=True))
        tok.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(LLAMA3_SPLIT), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
        tok.decoder = decoders.ByteLevel()
        tr = trainers.BpeTrainer(vocab_size=3000, show_progress=False,
                                 initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                 special_tokens=["<|begin_of_text|>", "<|end_of_text|>"])
        tok.train(DATA, tr)
        tok.add_tokens([tokenizers.AddedToken("<tool>", special=False)])  # a non-special added token
        tok.save(hf_llama3)
    # Qwen2's setup: normalizer NFC, its Split regex + ByteLevel(use_regex=False), trained on
    # data/*.txt plus texts with combining marks and Hangul; "\u212aelvin" (KELVIN SIGN, NFC: "Kelvin")
    # a normalized added token, "<tool>" one that is not.
    # hf_nfkc_seq.json: the same model under Sequence([NFKC, NFD]).
    hf_qwen2 = os.path.join(OUT, "hf_qwen2.json")
    if not os.path.exists(hf_qwen2):
        extra = os.path.join(OUT, "nfc_train.txt")
        with open(extra, "w", encoding="utf-8") as f:
            for _, text in norm_texts() * 20:
                f.write(text + "\n")
        tok = Tokenizer(models.BPE())
        tok.normalizer = normalizers.NFC()
        tok.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(QWEN2_SPLIT), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
        tok.decoder = decoders.ByteLevel()
        tr = trainers.BpeTrainer(vocab_size=3000, show_progress=False,
                                 initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                 special_tokens=["<|endoftext|>", "<|im_start|>", "<|im_end|>"])
        tok.train(DATA + [extra], tr)
        tok.add_tokens([tokenizers.AddedToken("\u212aelvin", special=False, normalized=True),
                        tokenizers.AddedToken("<tool>", special=False, normalized=False)])
        tok.save(hf_qwen2)
        tok.normalizer = normalizers.Sequence([normalizers.NFKC(), normalizers.NFD()])
        tok.save(os.path.join(OUT, "hf_nfkc_seq.json"))
        tok.normalizer = normalizers.Sequence([normalizers.NFC(), normalizers.Lowercase()])  # refused
        tok.save(os.path.join(OUT, "hf_bad_norm.json"))
    # Llama 2's settings; and user-defined pieces with remove_extra_whitespaces, no byte fallback
    for name, extra in (("spm", dict(byte_fallback=True, remove_extra_whitespaces=False)),
                        ("spm_user", dict(byte_fallback=False, remove_extra_whitespaces=True,
                                          user_defined_symbols=["<tool>", "lighthouse"], character_coverage=0.9995)),
                        ("spm_nfkc", dict(byte_fallback=True, normalization_rule_name="nmt_nfkc",
                                          remove_extra_whitespaces=True))):
        if not os.path.exists(os.path.join(OUT, name + ".model")):
            args = dict(input=",".join(DATA), model_prefix=os.path.join(OUT, name), model_type="bpe",
                        vocab_size=1200, normalization_rule_name="identity", add_dummy_prefix=True,
                        split_digits=True, character_coverage=1.0, num_threads=1, minloglevel=2)
            args.update(extra)
            spm.SentencePieceTrainer.train(**args)


def make_demo(dirname):
    """The two small tokenizers committed in tests/data for docs and tools: tokenizer_demo.json
    (Llama 3 style byte-level BPE, 1024 ids) and tokenizer_demo_spm.model (SentencePiece BPE
    with byte fallback, 1200 ids), both trained on data/*.txt. Run: tokenizer_ref.py --demo tests/data"""
    tok = Tokenizer(models.BPE(ignore_merges=True))
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(LLAMA3_SPLIT), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    tr = trainers.BpeTrainer(vocab_size=1024, show_progress=False, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                             special_tokens=["<|begin_of_text|>", "<|end_of_text|>"])
    tok.train(DATA, tr)
    tok.save(os.path.join(dirname, "tokenizer_demo.json"), pretty=False)
    os.chdir(ROOT)  # the model records its input and prefix paths: relative ones
    spm.SentencePieceTrainer.train(
        input=",".join(os.path.relpath(d, ROOT) for d in DATA),
        model_prefix=os.path.relpath(os.path.join(dirname, "tokenizer_demo_spm"), ROOT), model_type="bpe",
        vocab_size=1200, byte_fallback=True, normalization_rule_name="identity",
        remove_extra_whitespaces=False, add_dummy_prefix=True, split_digits=True,
        character_coverage=1.0, num_threads=1, minloglevel=2)
    os.remove(os.path.relpath(os.path.join(dirname, "tokenizer_demo_spm.vocab"), ROOT))


def texts():
    prose = open(DATA[0], encoding="utf-8").read()[:3000]
    code = open(os.path.join(ROOT, "tests", "oracle", "tokenizer_ref.py"), encoding="utf-8").read()[:3000]
    t = [
        ("empty", ""),
        ("prose", prose),
        ("code", code),
        ("contractions", "I'm sure you'll see it's 'd 'LL 'Re we'VE THEY'D don't 'ſ 'K ''s"),
        ("cjk", "日本語のテキストです。中文文本，包括标点符号！한국어 텍스트도 있습니다. 𠀀𪚥 ㈱ 々〆"),
        ("arabic", "النص العربي مع الأرقام ١٢٣٤٥ والتشكيل: مُحَمَّدٌ"),
        ("devanagari", "हिन्दी पाठ में संयुक्ताक्षर क्षत्रिय और अंक १२३ हैं।"),
        ("emoji", "Emoji 👍🏽 family 👨‍👩‍👧‍👦 flags 🇫🇷🇯🇵 keycap 1️⃣ ❤️ 🫠 text"),
        ("combining", "e\u0301te\u0301 Zalgo: Z\u0351\u036b\u0343a\u0310l\u0357g\u0346o\u0360 Tiếng Việt ñ n\u0303"),
        ("mixed_case", "HTTPServer getHTTPResponseCode ÉCOLE élève DžDž ǅungla ᾈ"),
        ("whitespace", "a  b   c\t\td\n\ne\r\nf \n g\u00a0h\u3000i\u2003j   \n\n   k  "),
        ("digits", "1 12 123 1234 12345 3.14159 1,000,000 ١٢٣٤ ४२ ⅫⅣ ½ ²"),
        ("punct", "Hello!!! What??? ...--- (a)[b]{c} <tag/> a/b/c /// \\\\ @#$%^&*"),
        ("nul", "a\0b\0\0 c \0"),
        ("run_spaces", " " * 5000 + "x"),
        ("run_spaces_end", "x" + " " * 4000),
        ("run_newlines", "\n" * 3000 + "y\n\n"),
        ("run_digits", "7" * 5000),
        ("run_letter", "a" * 20000),
        ("run_letter_cjk", "語" * 3000),
        ("run_punct", "!" * 4000 + "?"),
        ("long_word", "".join("abcdefghijklmnopqrstuvwxyz"[(i * 7919 + i // 26) % 26] for i in range(100000))),
        ("special_text", "before<|endoftext|>after <|endoftext|> <|begin_of_text|>x<|end_of_text|> <s>y</s> <tool> z"),
        ("astral", "𝔘𝔫𝔦𝔠𝔬𝔡𝔢 𝟘𝟙𝟚 𐐀𐐨 \U0001F600\U0001FAE8 \U000E0041 \U0010FFFD"),
        ("new_in_16", "\u1C89\u1C8A \U0001E5D0\U0001E5D1 \U00011380 \U000105C0 \U0001CC00 \U0002EBF0"),
        ("controls", "\x01\x02\x1b[0m\x7f\u0085\u200b\u200d\u2028\u2029\ufeff end"),
    ]
    return t


def norm_texts():
    """texts whose NFC differs from them, or that NFC must leave alone"""
    return [
        ("nfd_accents", "Cafe\u0301 de\u0301ja\u0300 vu, nai\u0308ve Zu\u0308rich A\u030a o\u0302\u0323 q\u0307\u0323"),
        ("nfc_accents", "Café déjà vu, naïve Zürich Å ộ ḍ̇ ﬁ ² Ⅻ ｶ ℌ ǆ"),
        ("added_normalized", "a Kelvin and a \u212aelvin <tool> <|im_start|>user\n\u212aelvins<|im_end|> K\u212a"),
        ("hangul_jamo", "\u1112\u1161\u11ab\u1100\u116e\u11af \u1100\u1161 \u110b\u1175\u11a8 한국어 \u3131\u314f 각\u11a8"),
        ("vietnamese", "Tiê\u0301ng Viê\u0323t Tiếng Việt co\u031b\u0300 ờ Nguyê\u0303n Nguyễn"),
        ("devanagari_nukta", "\u0915\u093c \u0958 \u0921\u093c\u0940 \u092f\u093c \u0931 \u0929 हिन्दी"),
        ("reorder", "a\u0323\u0302 a\u0302\u0323 e\u0301\u0327 \u0301x \u05b8\u05b7 >\u0338 =\u0338"),
        ("added_edges", "<tool>\u0338 >\u0338 <|im_end|>\u0301x a\u0301<tool>\u0301 \u212a<tool>"),
        ("exclusions", "\u0958\u2adc\u0f73\u0344\u212b\u2126 \U0001D15E \uf900 \u0340\u0341"),
    ]


def write_ref(name, cases):
    with open(os.path.join(OUT, "ref_%s.bin" % name + ".tmp"), "wb") as f:
        for cname, allow, text, ids, dec in cases:
            nb = cname.encode()
            tb = text.encode("utf-8")
            f.write(struct.pack("<I", len(nb)) + nb + struct.pack("<II", allow, len(tb)) + tb)
            f.write(struct.pack("<I", len(ids)) + struct.pack("<%di" % len(ids), *ids))
            f.write(struct.pack("<I", len(dec)) + dec)
    os.rename(os.path.join(OUT, "ref_%s.bin" % name + ".tmp"), os.path.join(OUT, "ref_%s.bin" % name))


# tiktoken's patterns (its cl100k_base()/o200k_base() would download their ranks): copied, and
# checked to be in tiktoken_ext/openai_public.py verbatim
CL100K_PAT = (r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}++|\p{N}{1,3}+| ?[^\s\p{L}\p{N}]++[\r\n]*+|\s++$|\s*[\r\n]|"""
              r"""\s+(?!\S)|\s""")
O200K_PARTS = [r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
               r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
               r"""\p{N}{1,3}""", r""" ?[^\s\p{L}\p{N}]+[\r\n/]*""", r"""\s*[\r\n]+""", r"""\s+(?!\S)""", r"""\s+"""]
_src = inspect.getsource(openai_public)
assert CL100K_PAT in _src and all(p in _src for p in O200K_PARTS), "tiktoken's patterns changed"


def write_norm_ref():
    """norm_FORM.bin for NFC, NFD, NFKC, NFKD from unicodedata2: every code point the form
    changes (u32 code point, u32 length, UTF-8), then u32 0xFFFFFFFF, then random strings of
    starters, combining marks, jamo and composites (u32 length, UTF-8, u32 length, UTF-8)."""
    rng = random.Random(15)
    marks = [c for c in range(0x300, 0x370)] + [0x5b7, 0x5b8, 0x093c, 0x0f71, 0x0f72, 0x0f74, 0x0f80,
                                                0x1dc0, 0x20d0, 0x302a, 0x3099, 0x309a, 0x0334, 0x0338,
                                                0x1d165, 0x1d16d, 0x0345, 0x0315, 0x031b]
    base = [ord(c) for c in "aeiouAEOUnNcCsSzyY>=<\u00e9\u00c5\u1ea0\u01b0\u0915\u0b47\u0bc6\u0cc6\u1025\u0f40"]
    base += [0x1100, 0x1112, 0x1161, 0x1175, 0x11a8, 0x11c2, 0xac00, 0xac01, 0xd7a3, 0x3046, 0x304b, 0x30a6]
    base += [0xfb01, 0x2460, 0xff76, 0x1e9b, 0x0958, 0x2adc, 0x0f73, 0x0344]
    for form in ("NFC", "NFD", "NFKC", "NFKD"):
        with open(os.path.join(OUT, "norm_%s.bin.tmp" % form), "wb") as f:
            for cp in range(0x110000):
                if 0xD800 <= cp <= 0xDFFF:
                    continue
                got = unicodedata2.normalize(form, chr(cp))
                if got != chr(cp):
                    g = got.encode("utf-8")
                    f.write(struct.pack("<II", cp, len(g)) + g)
            f.write(struct.pack("<I", 0xFFFFFFFF))
            for _ in range(20000):
                n = rng.randint(1, 12)
                x = "".join(chr(rng.choice(marks) if rng.random() < 0.55 else rng.choice(base)) for _ in range(n))
                a, b = x.encode("utf-8"), unicodedata2.normalize(form, x).encode("utf-8")
                f.write(struct.pack("<I", len(a)) + a + struct.pack("<I", len(b)) + b)
        os.rename(os.path.join(OUT, "norm_%s.bin.tmp" % form), os.path.join(OUT, "norm_%s.bin" % form))


def tt_encoding(name, rank_file, pat_name, specials):
    pat = {"gpt2": openai_public.r50k_pat_str, "cl100k_base": CL100K_PAT, "o200k_base": "|".join(O200K_PARTS)}[pat_name]
    return tiktoken.Encoding(name=name, pat_str=pat, mergeable_ranks=load_tiktoken_bpe(rank_file),
                             special_tokens=specials)


def main():
    os.makedirs(OUT, exist_ok=True)
    make_assets()
    T = texts()
    # tiktoken
    cl100k_specials = {"<|endoftext|>": 100257, "<|fim_prefix|>": 100258, "<|fim_middle|>": 100259,
                       "<|fim_suffix|>": 100260, "<|endofprompt|>": 100276}
    encs = {
        "tt_gpt2": tt_encoding("gpt2", os.path.join(VOCAB, "gpt2.tiktoken"), "gpt2", {"<|endoftext|>": 50256}),
        "tt_cl100k": tt_encoding("cl100k", os.path.join(VOCAB, "cl100k_base.tiktoken"), "cl100k_base", cl100k_specials),
        # o200k_base's ranks are not on PyPI: its pattern runs over cl100k_base's ranks here
        "tt_o200k_pat": tt_encoding("o200k_pat", os.path.join(VOCAB, "cl100k_base.tiktoken"), "o200k_base",
                                    {"<|endoftext|>": 199999, "<|endofprompt|>": 200018}),
    }
    for name, enc in encs.items():
        cases = []
        for cname, text in T:
            for allow in (0, 1):
                ids = enc.encode(text, allowed_special="all") if allow else enc.encode_ordinary(text)
                cases.append((cname, allow, text, ids, enc.decode_bytes(ids)))
        write_ref(name, cases)
    # Hugging Face tokenizers (GPT-2 vocab.json + merges.txt is checked against hf_gpt2 too)
    for name, path in (("hf_gpt2", "hf_gpt2.json"), ("hf_gpt2_prefix", "hf_gpt2_prefix.json"), ("hf_llama3", "hf_llama3.json")):
        tok = Tokenizer.from_file(os.path.join(OUT, path))
        cases = []
        for cname, text in T:
            for allow in (0, 1):
                tok.encode_special_tokens = not allow  # special=True added tokens as plain text
                ids = tok.encode(text, add_special_tokens=False).ids
                cases.append((cname, allow, text, ids, tok.decode(ids, skip_special_tokens=False).encode("utf-8")))
        write_ref(name, cases)
    # normalizers: the 13-tokenizer set's texts and the normalization texts
    for name, path in (("hf_qwen2", "hf_qwen2.json"), ("hf_nfkc_seq", "hf_nfkc_seq.json")):
        tok = Tokenizer.from_file(os.path.join(OUT, path))
        cases = []
        for cname, text in T + norm_texts():
            for allow in (0, 1):
                tok.encode_special_tokens = not allow
                ids = tok.encode(text, add_special_tokens=False).ids
                cases.append((cname, allow, text, ids, tok.decode(ids, skip_special_tokens=False).encode("utf-8")))
        write_ref(name, cases)
    write_norm_ref()
    # the committed demo tokenizer.json too
    tok = Tokenizer.from_file(os.path.join(ROOT, "tests", "data", "tokenizer_demo.json"))
    cases = []
    for cname, text in T:
        for allow in (0, 1):
            tok.encode_special_tokens = not allow
            ids = tok.encode(text, add_special_tokens=False).ids
            cases.append((cname, allow, text, ids, tok.decode(ids, skip_special_tokens=False).encode("utf-8")))
    write_ref("demo_hf", cases)
    # SentencePiece (no specials are parsed from text: allow_special 0 only), and the demo model
    for name, path in (("spm", os.path.join(OUT, "spm.model")), ("spm_user", os.path.join(OUT, "spm_user.model")),
                       ("spm_nfkc", os.path.join(OUT, "spm_nfkc.model")),
                       ("demo_spm", os.path.join(ROOT, "tests", "data", "tokenizer_demo_spm.model"))):
        sp = spm.SentencePieceProcessor(model_file=path)
        cases = []
        for cname, text in T:
            ids = sp.encode(text)
            cases.append((cname, 0, text, ids, sp.decode(ids).encode("utf-8")))
        write_ref(name, cases)
    # Pre-token boundaries of every pattern, from tokenizers' Split (Oniguruma): pat_NAME.json
    # (the pattern + ByteLevel over the 256 byte tokens) and pieces_NAME.bin (u32 name length,
    # name, u32 text length, text, u32 piece count, the pieces' end offsets in bytes as u32)
    pats = {"gpt2_bytelevel": GPT2_PAT, "r50k": openai_public.r50k_pat_str, "cl100k": CL100K_PAT,
            "o200k": "|".join(O200K_PARTS), "llama3": LLAMA3_SPLIT, "qwen2": QWEN2_SPLIT}
    b2u = bytes_to_unicode()
    for pname, pat in pats.items():
        tok = Tokenizer(models.BPE(vocab={b2u[b]: b for b in range(256)}, merges=[]))
        tok.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(pat), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
        tok.save(os.path.join(OUT, "pat_%s.json" % pname))
        split = pre_tokenizers.Split(Regex(pat), behavior="isolated", invert=False)
        with open(os.path.join(OUT, "pieces_%s.bin.tmp" % pname), "wb") as f:
            for cname, text in T:
                ends, e = [], 0
                for piece, _ in split.pre_tokenize_str(text):
                    e += len(piece.encode("utf-8"))
                    ends.append(e)
                nb, tb = cname.encode(), text.encode("utf-8")
                f.write(struct.pack("<I", len(nb)) + nb + struct.pack("<I", len(tb)) + tb)
                f.write(struct.pack("<I", len(ends)) + struct.pack("<%dI" % len(ends), *ends))
        os.rename(os.path.join(OUT, "pieces_%s.bin.tmp" % pname), os.path.join(OUT, "pieces_%s.bin" % pname))
    # Unicode classes through both regex engines
    ranks = {bytes([i]): i for i in range(256)}
    everything = "".join(chr(c) for c in range(0x110000) if not 0xD800 <= c <= 0xDFFF)
    with open(os.path.join(OUT, "unicode_classes.bin.tmp"), "wb") as f:
        for cls in ["\\p{L}", "\\p{Lu}", "\\p{Ll}", "\\p{Lt}", "\\p{Lm}", "\\p{Lo}", "\\p{N}", "\\p{M}", "\\s"]:
            enc = tiktoken.Encoding(name="probe", pat_str=cls, mergeable_ranks=ranks, special_tokens={})
            got = enc.decode_bytes(enc.encode_ordinary(everything)).decode()
            hf = "".join(p for p, _ in pre_tokenizers.Split(Regex(cls), "removed", invert=True).pre_tokenize_str(everything))
            if got != hf:
                print("tokenizer_ref: tiktoken and tokenizers disagree on %s" % cls, file=sys.stderr)
                sys.exit(1)
            cps = [ord(c) for c in got]
            # the same class as a tokenizer.json (Split on CLASS+, ByteLevel, 256 byte tokens)
            # for the C test, which reads the class back from its pieces
            b2u = bytes_to_unicode()
            tok = Tokenizer(models.BPE(vocab={b2u[b]: b for b in range(256)}, merges=[]))
            tok.pre_tokenizer = pre_tokenizers.Sequence([
                pre_tokenizers.Split(Regex(cls + "+"), behavior="isolated", invert=False),
                pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
            tok.save(os.path.join(OUT, "class_%s.json" % cls.strip("\\p{}")))
            f.write(struct.pack("<I", len(cls)) + cls.encode() + struct.pack("<I", len(cps)))
            f.write(struct.pack("<%dI" % len(cps), *cps))
    os.rename(os.path.join(OUT, "unicode_classes.bin.tmp"), os.path.join(OUT, "unicode_classes.bin"))
    print("tokenizer_ref: tiktoken %s, tokenizers %s, sentencepiece %s -> %s" %
          (tiktoken.__version__, tokenizers.__version__, spm.__version__, OUT))


if __name__ == "__main__":
    if sys.argv[1] == "--demo":
        make_demo(sys.argv[2])
    else:
        main()
