#!/usr/bin/env python3
"""bench/tokenizer_peer.py THREADS OUTDIR — the reference tokenizers' speed, for bench/tokenizer.c.

Writes the two bench texts (if missing) into OUTDIR and prints, for each, one line
    peer LIBRARY TEXT MB_PER_S
for tiktoken (cl100k_base ranks, encode_ordinary_batch with THREADS threads) and Hugging Face
tokenizers (GPT-2's tokenizer.json from tests/oracle/tokenizer_ref.py, encode_batch with
RAYON_NUM_THREADS=THREADS). Best of 3 passes over all documents; documents are the paragraphs
(split at blank lines).
  english.txt       data/*.txt, repeated to 8 MB
  multilingual.txt  paragraphs in 12 scripts (English, Chinese, Japanese, Korean, Arabic,
                    Hindi, Russian, Greek, Hebrew, Thai, Vietnamese, emoji), 8 MB
"""
import glob
import os
import sys
import time

THREADS = int(sys.argv[1])
OUT = sys.argv[2]
os.environ["RAYON_NUM_THREADS"] = str(THREADS)
os.environ["TOKENIZERS_PARALLELISM"] = "true"
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

import tiktoken  # noqa: E402
from tiktoken.load import load_tiktoken_bpe  # noqa: E402
from tokenizers import Tokenizer  # noqa: E402

sys.path.insert(0, os.path.join(ROOT, "tests", "oracle"))
SIZE = 8 << 20

SENTENCES = [
    "The river ran slowly past the old mill, and the children counted the boats that went by.",
    "河水缓缓流过老磨坊，孩子们数着经过的船只。今天的天气很好，我们去公园散步吧。",
    "川はゆっくりと古い水車小屋のそばを流れ、子供たちは通り過ぎる船を数えました。",
    "강물은 오래된 방앗간 옆을 천천히 흘렀고, 아이들은 지나가는 배를 세었다.",
    "جرى النهر ببطء بجوار الطاحونة القديمة، وعدّ الأطفال القوارب التي مرت.",
    "नदी पुरानी चक्की के पास से धीरे-धीरे बहती थी, और बच्चे गुज़रती नावों को गिनते थे।",
    "Река медленно текла мимо старой мельницы, и дети считали проплывающие лодки.",
    "Το ποτάμι κυλούσε αργά δίπλα στον παλιό μύλο και τα παιδιά μετρούσαν τις βάρκες.",
    "הנהר זרם לאט ליד הטחנה הישנה, והילדים ספרו את הסירות שעברו.",
    "แม่น้ำไหลผ่านโรงสีเก่าอย่างช้าๆ และเด็กๆ นับเรือที่แล่นผ่านไป",
    "Dòng sông chảy chậm qua cối xay cũ, và bọn trẻ đếm những chiếc thuyền đi qua.",
    "Emoji 🌊🚣‍♀️🏞️ and more: 👍🏽🎉✨ 2024-05-01 #river @mill",
]


def make_texts():
    eng = os.path.join(OUT, "bench_english.txt")
    if not os.path.exists(eng):
        corpus = "\n\n".join(open(f, encoding="utf-8").read().strip() for f in sorted(glob.glob(os.path.join(ROOT, "data", "*.txt"))))
        text = corpus
        while len(text.encode()) < SIZE:
            text += "\n\n" + corpus
        open(eng, "w", encoding="utf-8").write(text)
    mul = os.path.join(OUT, "bench_multilingual.txt")
    if not os.path.exists(mul):
        paras, x, size = [], 12345, 0
        while size < SIZE:
            sent = []
            for _ in range(8):
                x = (x * 1103515245 + 12345) & 0x7fffffff
                sent.append(SENTENCES[(x >> 8) % len(SENTENCES)])
            p = " ".join(sent)
            paras.append(p)
            size += len(p.encode()) + 2
        open(mul, "w", encoding="utf-8").write("\n\n".join(paras))
    return [("english", eng), ("multilingual", mul)]


def best(fn, docs):
    t = []
    for _ in range(3):
        t0 = time.perf_counter()
        fn(docs)
        t.append(time.perf_counter() - t0)
    return min(t)


def main():
    os.makedirs(OUT, exist_ok=True)
    texts = make_texts()
    vocab = os.path.join(ROOT, ".venv", "share", "vocab")
    import tokenizer_ref
    enc = tiktoken.Encoding(name="cl100k", pat_str=tokenizer_ref.CL100K_PAT,
                            mergeable_ranks=load_tiktoken_bpe(os.path.join(vocab, "cl100k_base.tiktoken")),
                            special_tokens={})
    hf = Tokenizer.from_file(os.path.join(OUT, "hf_gpt2.json"))
    for name, path in texts:
        text = open(path, encoding="utf-8").read()
        docs = text.split("\n\n")
        mb = len(text.encode()) / 1e6
        s = best(lambda d: enc.encode_ordinary_batch(d, num_threads=THREADS), docs)
        print("peer tiktoken %s %.2f" % (name, mb / s), flush=True)
        s = best(lambda d: hf.encode_batch(d, add_special_tokens=False), docs)
        print("peer tokenizers %s %.2f" % (name, mb / s), flush=True)


if __name__ == "__main__":
    main()
